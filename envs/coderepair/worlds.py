"""CodeRepair's fresh worlds computed from per-issue outcomes: what a world changes and what it does not.

A world (`world_seed`) draws the house conventions of each era, the tracker numbers and each
release's issue order; the 26 regressions are the same. A memoryless engineer that writes its
changelog fragment and regression test with a fixed guess of the conventions (the scripted
reference, the red team's `house-guesser` priors) takes the same actions on an issue in every
world but the names of the two files: whether it fixes the issue, in how many steps, and whether
its regression test fails on the buggy release and passes on the fixed one do not depend on the
world. Its reward on an issue in a world is then `house.reward` of those outcomes and of how many
of the era's drawn conventions its guess meets. This module computes that, per world, from the
outcomes measured once (`Outcome`); tests/test_coderepair.py and benchmarks/bench_coderepair.py
compare it with worlds played in full. Learning agents and the oracle are played, never computed.
"""
from __future__ import annotations

from dataclasses import dataclass

from clbench.envs.coderepair import house


@dataclass(frozen=True)
class Outcome:
    """A memoryless engineer's outcome on one issue, the same in every world."""

    resolved: bool
    steps: int
    behaviour: bool  # its regression test fails on the buggy release and passes on the fixed one


#: the stateless reference's outcomes on the issues it resolves (it resolves no other in any world), as
#: measured in the canonical world (bwrap, v4's calibration pass: its mean there is default.yaml's
#: r_reference, which tests/test_coderepair.py checks); its regression test meets test-behaviour on each
REFERENCE_OUTCOMES = {issue: Outcome(True, steps, True) for issue, steps in (
    ("tablib-03", 7), ("tablib-05", 9), ("tenacity-11", 6), ("tenacity-12", 8),
    ("tenacity-04", 6), ("tenacity-13", 6), ("tenacity-16", 6), ("tenacity-17", 8))}


def era_guesses(env) -> list[tuple]:
    """This world's drawn conventions per era, as tuples of candidate indices in house.DRAWN order."""
    return [tuple(era.choice[name] for name in house.DRAWN) for era in env._eras]


def issue_eras(env) -> dict[str, int]:
    """Issue id -> era index, over the env's schedule."""
    return {inst.instance_id: env._era_of[v.name] for v in env.schedule.variants for inst in v.instances}


def guess_mean(env, outcomes: dict[str, Outcome], guess) -> float:
    """Mean reward over the schedule of a memoryless engineer with these per-issue `outcomes` (issues
    missing: unresolved) whose fixed guess of the conventions is `guess(era index)` (a tuple of
    candidate indices), in `env`'s world."""
    truth, eras = era_guesses(env), issue_eras(env)
    total = 0.0
    for issue_id, era in eras.items():
        out = outcomes.get(issue_id)
        if out is None or not out.resolved:
            continue
        met = sum(g == t for g, t in zip(guess(era), truth[era])) + out.behaviour
        total += house.reward(met, out.steps, env.max_steps)
    return total / len(eras)


def family_means(env, outcomes: dict[str, Outcome]) -> dict[str, float]:
    """The memoryless guessers' means in `env`'s world: the reference's guess (the most common choices),
    each `house-guesser` prior, and the canonical world's published choices (the best of its eras for
    each era: any mapping of releases to them)."""
    width = len(house.DRAWN)
    canonical = [tuple(c.choice[n] for n in house.DRAWN)
                 for c in house.written_eras(env.spec_data["house_conventions"])]
    truth = era_guesses(env)

    def best_canonical(era):
        return max(canonical, key=lambda c: sum(a == b for a, b in zip(c, truth[era])))

    out = {"reference": guess_mean(env, outcomes, lambda era: (0,) * width)}
    for prior in range(1, max(map(len, house.CANDIDATES.values()))):
        out[f"house-guesser prior {prior}"] = guess_mean(env, outcomes, lambda era, p=prior: (p,) * width)
    out["canonical values"] = guess_mean(env, outcomes, best_canonical)
    return out
