"""Poker's difficulty per world (issue 28/29 closing notes): one JSON line per world.

    python tasks/poker/measure_worlds.py c,1,2,3      # c: the canonical world; --full: the red team's full grids

Per world: r_max and r_reference (calibrated, cached), the reference's normalized gain and the drift cost
(`clbench drift-check`, 2 rollouts), and the red team's verdict: each family's point chosen on re-deals 1-4,
its mean on the benchmark's hands (and its margin over the reference there) and over held-out re-deals 5-12
next to the reference's.
"""
from __future__ import annotations

import json
import sys

import numpy as np

import clbench  # noqa: F401  registers the envs
from clbench import redteam
from clbench.agents.poker import PLAYBOOKS
from clbench.agents.poker_redteam import choose, replay
from clbench.commands.drift_check import run_drift_check
from clbench.envs.poker.poker_env import PokerEnv

ENV = PokerEnv.env_id


def mean(policy, env, deals=(0,)) -> float:
    return float(np.mean([r for k in deals for r in replay(env, policy, k).values()]))


def measure(world, full: bool = False) -> dict:
    base = PokerEnv(world_seed=world)
    rep = run_drift_check(ENV, {} if world is None else {"world_seed": world}, rollouts=2)
    reference, held = PLAYBOOKS["default"], range(5, 13)
    chosen = choose(base, redteam.families(PokerEnv), full=full)
    bench = {name: mean(p, base) for name, (_, p) in chosen.items()}
    expected = {name: mean(p, base, held) for name, (_, p) in chosen.items()}
    best, best_exp = max(bench, key=bench.get), max(expected, key=expected.get)
    return {"world": world, "r_max": rep["r_max"], "r_reference": rep["r_reference"],
            "gain": rep["normalized_gain"]["mean"], "drift_cost": rep["drifts"][0]["cost"]["mean"],
            "rt_best": best, "rt_best_bench": bench[best], "rt_minus_ref": bench[best] - mean(reference, base),
            "rt_best_exp": best_exp, "rt_exp": expected[best_exp], "ref_exp": mean(reference, base, held),
            "styles": {k: v["style"] for k, v in base.opponent_specs.items()}}


if __name__ == "__main__":
    for w in sys.argv[1].split(","):
        print(json.dumps(measure(None if w == "c" else int(w), "--full" in sys.argv)), flush=True)
