"""The red team in the box: non-learning adversaries that must not reach an env's r_reference.

`clbench redteam --env ID` (clbench.commands.redteam) plays, on one world and schedule:

- the degenerate agents (clbench.agents.degenerate: first-legal, submit, empty, fixed:NAME);
- the policy families the env declares (`policy_families`): memoryless, observation-reading (or
  blind) parametric policies, played stateless; a family marked stateful (an env's own
  feedback-only memorizer, say) is played as one stateful rollout;
- `train-answers`: the oracle played on the train split (another world, the same kind of
  structure), its actions per instance replayed blind on the test twin (the same id without the
  "train-" prefix): what a train split that shared answers would pay;
- `train-learned`: the env's stateful reference trained on one rollout of the train split and then
  frozen, played stateless: on each instance a fresh reference loads the state it had at the end of
  the instance's variant there and learns nothing more. What a train split that shared answers with
  the test split (not only their kind) would pay a system trained on it (red team s16: Poker's did);
- `feedback-memorizer`: a stateful agent that reads nothing but the rewards its feedback reports;
  it tries every constant reply once, then replays whichever action sequence it played scored
  best so far in the instance's variant (overall, where the variant has no score yet); one
  stateful rollout.

How a family's point is chosen. An env whose instances can be dealt anew with the same latent
structure (`redealable = True`; `redeal=K` keeps the world and draws its instances again) has its
families' grids searched on re-deals 1..K (`redeals`: 2 by default, 6 with --full / CLBENCH_SLOW=1):
each family's point with the best mean over the re-deals is then played on the benchmark's own
instances (redeal 0, every deal of it: an env with `deals > 1` plays one rollout or pass per deal), and
the verdict is that point's benchmark mean against r_reference. The
scored instances are never used to choose: in a noisy env the best of hundreds of near-equal
points on the scored instances beats the reference by selection luck (the maximum of many noisy
means), which measures the draw, not a policy; a point chosen elsewhere and reaching r_reference
on the benchmark is a policy that does, unless the benchmark's own cards favoured it: a point that
differs from the stateless reference on a few instances only ties it in expectation and beats it on
one set of instances half the time. So a chosen point that reaches r_reference on the benchmark is
played again, with the stateless reference, on `confirm_deals` other re-deals (never the ones it was
chosen on); it fails unless it falls below the reference there (`luck`: its lead there is shown in
the table). Envs without re-deals keep the stricter rule: every point of every grid is played on the
benchmark and none may reach r_reference.

On a fresh world (`world_seed=N`) this rule chooses on the world's own re-deals (or scored years), which learns that
world from far more of it than a stateful agent sees: its lead is held to a band, not to 0 (`world_band`). Fresh
worlds are judged by the pooled verdict instead (`pooled_verdict`, `clbench redteam --pooled-worlds 1-20`): each
family's point chosen on the train split's worlds and frozen (`train_choice`) must not lead the stateless reference
pooled over the fresh worlds (`PooledLead`). An env opts in through its red-team module's `FRESH_WORLD_JUDGE` (a
`FreshWorldJudge`: how it chooses on the train split and measures a frozen point's lead in one world).

Each is played through the runner (the process pool) into a temporary run directory; a policy
whose benchmark mean reaches r_reference fails the env (tests/test_redteam.py).
"""
from __future__ import annotations

import abc
import hashlib
import importlib
import inspect
import itertools
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from clbench.agent import Agent

TRAIN_ANSWERS = "train-answers"
TRAIN_LEARNED = "train-learned"
MEMORIZER = "feedback-memorizer"
REFERENCE = "stateless-reference"  # the system name of the stateless reference where a verdict is confirmed
#: Policy.family values that are not declared policy families (never chosen on re-deals)
NOT_FAMILIES = ("degenerate", "generic")


def slow() -> bool:
    """Whether the full search is asked for (CLBENCH_SLOW=1)."""
    return os.environ.get("CLBENCH_SLOW", "") not in ("", "0")


def privileged(tool):
    """Marks a red-team measuring function that reads an env's ground truth (its realised outcomes, its scoring
    module): a tool of the red team, never an agent. tests/test_reference_imports.py allows env imports in the body
    of a function so marked (`@redteam.privileged`), as in an oracle class's (`privileged = True`), and nowhere else."""
    tool.privileged = True
    return tool


@dataclass(frozen=True)
class PolicyFamily:
    """One family of `policy_families`: the agent class ("module:Class"), its parameter grid
    (the default search), an optional larger grid (`full_grid`, searched with CLBENCH_SLOW=1 or
    --full) and whether it keeps state across instances (then played as one stateful rollout)."""

    cls: str
    grid: dict = field(default_factory=dict)
    stateful: bool = False
    full_grid: dict | None = None

    def points(self, full: bool = False) -> list[dict]:
        """Every parameter combination of the grid (the full grid when asked and declared)."""
        grid = self.full_grid if full and self.full_grid is not None else self.grid
        names = sorted(grid)
        return [dict(zip(names, values)) for values in itertools.product(*(list(grid[n]) for n in names))]


def as_family(entry) -> PolicyFamily:
    """A `policy_families` value as a PolicyFamily: ("module:Class", grid), ("module:Class", grid,
    "stateful" | {"stateful": bool, "full_grid": {...}}) or a PolicyFamily itself."""
    if isinstance(entry, PolicyFamily):
        return entry
    if not isinstance(entry, (tuple, list)) or len(entry) not in (2, 3) or not isinstance(entry[0], str):
        raise TypeError(f"a policy family is ('module:Class', grid[, 'stateful' | options]), got {entry!r}")
    cls, grid, *rest = entry
    options = rest[0] if rest else {}
    if isinstance(options, str):
        if options not in ("stateful", "stateless"):
            raise ValueError(f"a policy family's third element is 'stateful', 'stateless' or options, not {options!r}")
        options = {"stateful": options == "stateful"}
    return PolicyFamily(cls, dict(grid or {}), **options)


def families(env_cls) -> dict[str, PolicyFamily]:
    """The env class's declared policy families by name."""
    return {name: as_family(entry) for name, entry in (env_cls.policy_families or {}).items()}


def family_points(env_id: str, full: bool = False):
    """(family, class path, params) for every point of every declared family's grid (the full grid when `full`)."""
    from clbench.registry import env_class

    for fam, f in families(env_class(env_id)).items():
        for params in f.points(full=full):
            yield fam, f.cls, params


@dataclass
class Policy:
    """One policy the red team plays: a row of its table."""

    name: str  # unique label (the run's system name)
    family: str
    agent: str  # agent name or "module:Class"
    params: dict
    stateful: bool = False
    mean: float | None = None  # on the benchmark's instances (what the verdict is on)
    skipped: str | None = None  # why it was not played
    #: a redealable env's family points: mean reward per re-deal (never redeal 0, the benchmark)
    selection: dict[int, float] = field(default_factory=dict)
    chosen: bool | None = None  # None: not a choice (every point on the benchmark, or not a family)
    #: a tie with r_reference passes: the policy is the stateless reference when it carries nothing over
    #: (train-learned whose learning lives outside its state, e.g. in a workspace a stateless pass never keeps)
    tie_passes: bool = False
    #: a chosen point that reached r_reference on the benchmark: its mean minus the stateless reference's on
    #: other re-deals (`confirm_deals`); below 0, the benchmark's cards favoured it and it passes
    held_out_lead: float | None = None

    @property
    def luck(self) -> bool:
        # below by more than rounding: the reference's own play ties it to the last bits of the means
        return self.held_out_lead is not None and self.held_out_lead < -1e-9

    @property
    def selection_mean(self) -> float | None:
        return float(np.mean(list(self.selection.values()))) if self.selection else None

    def row(self, r_reference: float | None, r_max: float | None) -> dict:
        return {"policy": self.name, "family": self.family, "params": self.params, "stateful": self.stateful,
                "selection_mean": self.selection_mean, "selection": dict(self.selection), "chosen": self.chosen,
                "mean": self.mean, "r_reference": r_reference, "r_max": r_max,
                "tie_passes": self.tie_passes, "held_out_lead": self.held_out_lead, "luck": self.luck,
                # set by `run` on a fresh world: a family point chosen on the world's own data that lies in its band
                "within_band": False,
                "verdict": ("not chosen on the re-deals" if self.chosen is False and not self.skipped
                            else f"ok: the benchmark's luck ({self.held_out_lead:+.3g} against the stateless "
                                 "reference on other re-deals)" if self.luck
                            else verdict(self.mean, r_reference, self.skipped, self.tie_passes))}


def redeals(full: bool = False) -> int:
    """How many re-deals a redealable env's family grids are searched on (more with --full / CLBENCH_SLOW=1)."""
    return 6 if full or slow() else 2


def confirm_count(full: bool = False) -> int:
    """How many other re-deals confirm a chosen point that reached r_reference on the benchmark."""
    return 16 if full or slow() else 8


def confirm_deals(env_kwargs: dict, k: int, n: int) -> list[int]:
    """The `n` re-deals after the `k` a point was chosen on (`selection_deals`), skipping the deal under test."""
    own, chosen = int(env_kwargs.get("redeal", 0)), set(selection_deals(env_kwargs, k))
    return [d for d in range(1, k + n + 2) if d != own and d not in chosen][:n]


@dataclass(frozen=True)
class PooledLead:
    """A frozen policy's lead over the stateless reference pooled over fresh worlds (issue 29): the mean over worlds
    of its per-world lead (each judged on held-out deals or years), the standard error across worlds, and in how many
    worlds it leads. A point chosen on the train split and frozen is a memoryless policy written without the fresh
    worlds; it fails the env when its mean lead is above 0 by two standard errors (`leads`). A point chosen on a
    fresh world's own data is not such a policy: it learned the world from more of it than a stateful agent gets."""

    mean: float
    se: float
    leading: int  # worlds where its lead is above 0
    worlds: int

    @classmethod
    def of(cls, leads) -> "PooledLead":
        x = np.asarray(list(leads), dtype=float)
        return cls(float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else float("inf"),
                   int((x > 0).sum()), int(x.size))

    @property
    def leads(self) -> bool:
        return self.mean > 2 * self.se

    def __str__(self) -> str:
        return f"{self.mean:+.4f} +- {self.se:.4f} (leads in {self.leading} of {self.worlds})"


class FreshWorldJudge(abc.ABC):
    """How an env's red-team module judges fresh worlds (its module attribute `FRESH_WORLD_JUDGE`; issue 29).

    Subclasses give `task` and implement `choose` (each family's point, {family: params}, chosen on the train split's
    worlds only, never a test-split world) and `leads` (each frozen point's lead over the stateless reference in one
    fresh world, {family: lead} in the env's reward unit). `world_band`: how far above r_reference a family point
    chosen on a fresh world's own data may come in `run` (None: held to r_reference)."""

    task: str = ""
    world_band: float | None = None

    @property
    def env_id(self) -> str:
        from clbench.registry import env_id_for

        return env_id_for(self.task)

    def families(self, full: bool = False) -> dict[str, PolicyFamily]:
        """The families judged: the env's declared ones (a judge may add attacks it does not declare)."""
        from clbench.registry import env_class

        return families(env_class(self.env_id))

    @abc.abstractmethod
    def choose(self, full: bool = False) -> dict[str, dict]:
        """Each family's point chosen on the train split's worlds: {family: params}."""

    @abc.abstractmethod
    def leads(self, world: int, chosen: dict[str, dict], full: bool = False) -> dict[str, float]:
        """Each frozen point's (`chosen`) lead over the stateless reference in fresh world `world`: {family: lead}."""

    def fingerprint(self, full: bool = False) -> str:
        """16 hex digits naming the code and spec a train choice comes from (the env's code and task spec, the
        judge's and the families' modules) and the grids asked for."""
        from clbench.calibration import class_fingerprint
        from clbench.registry import env_class

        modules = {f.cls.partition(":")[0] for f in self.families(full).values()}
        files = {inspect.getfile(type(self)), *(inspect.getfile(importlib.import_module(m)) for m in modules)}
        # the env's code and task spec, from which its train worlds are drawn, without building one
        digest = hashlib.sha256(f"{class_fingerprint(env_class(self.env_id))} full={bool(full)}".encode())
        for path in sorted(files):
            digest.update(Path(path).name.encode() + b"\0" + Path(path).read_bytes() + b"\0")
        return digest.hexdigest()[:16]


def fresh_world_judge(env_id: str) -> FreshWorldJudge | None:
    """The env's `FRESH_WORLD_JUDGE`, from the module of its declared families that defines one (None: none does)."""
    from clbench.registry import env_class

    for module in sorted({f.cls.partition(":")[0] for f in families(env_class(env_id)).values()}):
        judge = getattr(importlib.import_module(module), "FRESH_WORLD_JUDGE", None)
        if judge is not None:
            return judge
    return None


_TRAIN_CHOICES: dict[str, dict[str, dict]] = {}


def train_choice(judge: FreshWorldJudge, full: bool = False) -> dict[str, dict]:
    """`judge.choose(full)`, kept in this process and in clbench's cache (named by `judge.fingerprint`): a search
    over the train split's worlds takes seconds to minutes and every fresh-world verdict reuses it."""
    from clbench.calibration import cache_root

    key = f"{judge.task}-train-choice-{judge.fingerprint(full)}"
    if key in _TRAIN_CHOICES:
        return _TRAIN_CHOICES[key]
    path = cache_root().parent / "redteam" / f"{key}.json"
    try:
        chosen = json.loads(path.read_text())
    except (OSError, ValueError):
        chosen = judge.choose(full)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(chosen))
        os.replace(tmp, path)  # whole or absent, whichever of two writers finishes last
    _TRAIN_CHOICES[key] = chosen
    return chosen


def pooled_verdict(env_id: str, worlds, full: bool = False, judge: FreshWorldJudge | None = None) -> dict:
    """The fresh-world verdict (issue 29): each family's point chosen on the train split (`train_choice`), frozen and
    played on every world of `worlds`; its per-world leads over the stateless reference pooled (`PooledLead`), and
    a failure where the pooled lead is above 0 by two standard errors. Returns {"env_id", "worlds", "rule",
    "rows": [{"family", "params", "pooled", "leads", "verdict"}], "failures"} (`pooled`: a PooledLead; `leads`:
    {world: lead})."""
    judge = judge or fresh_world_judge(env_id)
    if judge is None:
        raise ValueError(f"{env_id} has no fresh-world judge (FRESH_WORLD_JUDGE in its red-team module)")
    worlds = [int(w) for w in worlds]
    chosen = train_choice(judge, full)
    by_world = {w: judge.leads(w, chosen, full) for w in worlds}
    rows = []
    for fam, params in chosen.items():
        pooled = PooledLead.of(by_world[w][fam] for w in worlds)
        rows.append({"family": fam, "params": params, "pooled": pooled, "leads": {w: by_world[w][fam] for w in worlds},
                     "verdict": "LEADS the stateless reference pooled" if pooled.leads else "ok"})
    return {"env_id": env_id, "worlds": worlds, "rows": rows, "failures": [r for r in rows if r["pooled"].leads],
            "rule": "each family's point chosen on the train split's worlds, frozen, played on every world; fails when "
                    "its mean lead over the stateless reference is above 0 by two standard errors across worlds"}


def format_pooled(report: dict) -> str:
    """The pooled verdict's table as markdown, the worst-leading family first."""
    worlds = report["worlds"]
    contiguous = worlds == list(range(worlds[0], worlds[-1] + 1))
    span = f"{worlds[0]}-{worlds[-1]}" if contiguous else ",".join(map(str, worlds))
    lines = [f"{report['env_id']}, fresh worlds {span}: {report['rule']}",
             "| family | train-chosen point | pooled lead (mean +- se, worlds leading) | verdict |",
             "|---|---|---|---|"]
    for r in sorted(report["rows"], key=lambda r: -r["pooled"].mean):
        params = ", ".join(f"{k}={v}" for k, v in r["params"].items()) or "-"
        lines.append(f"| {r['family']} | {params} | {r['pooled']} | {r['verdict']} |")
    return "\n".join(lines)


def parse_worlds(text: str) -> list[int]:
    """World seeds from "1-20", "1,2,5" or a mix ("1-3,7")."""
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, sep, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    if not out or any(w < 1 for w in out):
        raise ValueError(f"fresh worlds are seeds >= 1, e.g. 1-20 or 1,2,5; got {text!r}")
    return out


def reaches(mean: float | None, r_reference: float | None, tie_passes: bool = False) -> bool:
    """Whether a mean reaches r_reference (up to rounding: a tie is a failure unless `tie_passes`, when only
    a mean above it is)."""
    if mean is None or r_reference is None:
        return False
    rounding = 1e-9 * max(1.0, abs(r_reference))
    return mean > r_reference + rounding if tie_passes else mean >= r_reference - rounding


def verdict(mean, r_reference, skipped=None, tie_passes: bool = False) -> str:
    if skipped:
        return f"skipped: {skipped}"
    if r_reference is None:
        return "no r_reference"
    return "REACHES r_reference" if reaches(mean, r_reference, tie_passes) else "ok"


def plan(env_id: str, full: bool = False, include: tuple[str, ...] = ("degenerate", "families", TRAIN_ANSWERS,
                                                                       TRAIN_LEARNED, MEMORIZER)) -> list[Policy]:
    """The policies the red team plays on `env_id` (degenerate agents, every family's grid points,
    train-answers, train-learned, the feedback memorizer)."""
    from clbench.agents.degenerate import degenerate_agents
    from clbench.registry import env_class

    cls = env_class(env_id)
    out: list[Policy] = []
    if "degenerate" in include:
        out += [Policy(name, "degenerate", name, {}) for name in degenerate_agents(env_id)]
    if "families" in include:
        for fam_name, fam in sorted(families(cls).items()):
            points = fam.points(full or slow())
            for params in points:
                label = fam_name + ("" if not params else "(" + ",".join(f"{k}={v}" for k, v in params.items()) + ")")
                out.append(Policy(label, fam_name, fam.cls, params, stateful=fam.stateful))
    for name, agent in ((TRAIN_ANSWERS, "ReplayAgent"), (TRAIN_LEARNED, "TrainLearned")):
        if name in include:
            pol = Policy(name, "generic", f"{__name__}:{agent}", {}, tie_passes=name == TRAIN_LEARNED)
            if cls.no_train_split:
                pol.skipped = f"no train split ({cls.no_train_split})"
            out.append(pol)
    if MEMORIZER in include:
        out.append(Policy(MEMORIZER, "generic", f"{__name__}:FeedbackMemorizer", {}, stateful=True))
    return out


def train_actions(env_id: str, env_kwargs: dict, workers: int, out: Path) -> dict[str, list[str]]:
    """The oracle's actions per instance on the train split, keyed by its test twin's id."""
    from clbench.results import iter_jsonl, reset_of, split_instances
    from clbench.run_dir import stateless_trajectories
    from clbench.rollout import run_many
    from clbench.runner import RunConfig, cached_env

    kwargs = {**env_kwargs, "split": "train"}
    task = cached_env(env_id, kwargs).unwrapped.task
    run_many([RunConfig(env_id=env_id, agent="oracle", out=str(out), system="train-oracle", mode="stateless",
                        stateless_passes=1, workers=workers, env_kwargs=kwargs, calibrate=False)], quiet=True)
    actions: dict[str, list[str]] = {}
    for path in stateless_trajectories(out, task, "train-oracle", 0):
        for group in split_instances(ev for _, ev in iter_jsonl(path)):
            reset = reset_of(group)
            if reset is not None:
                twin = reset["instance_id"].removeprefix("train-")
                actions[twin] = [ev["action"] for ev in group if ev.get("event") == "step"]
    return actions


def train_states(env_id: str, env_kwargs: dict) -> dict[str, dict]:
    """The stateful reference's `state_dict()` at the end of each variant of one rollout (seed 0) on the
    train split, by variant name (a train variant and its test twin share the name)."""
    from clbench.agent import make_agent
    from clbench.runner import make_env, stateful_instances

    env = make_env(env_id, **{**env_kwargs, "split": "train"})
    try:
        agent = make_agent("reference", env, seed=0)
        # the variant's last instance leaves its state
        return {info["variant"]: agent.state_dict() for info, _ in stateful_instances(env, agent, 0)}
    finally:
        env.close()


def _play(env_id: str, policies: list[Policy], env_kwargs: dict, workers: int, out: Path,
          params: dict[str, dict] | None = None) -> dict[str, float]:
    """Each policy's mean reward on the instances `env_kwargs` deal, over every deal the benchmark plays
    (one run directory `out`), by name."""
    from clbench.registry import env_class
    from clbench.results import load_records
    from clbench.rollout import run_many
    from clbench.runner import RunConfig, cached_env

    params = params or {}
    n = env_class(env_id).deals  # every deal the benchmark plays (one rollout or pass per deal)
    cfgs = [RunConfig(env_id=env_id, agent=pol.agent, out=str(out), system=pol.name,
                      mode="stateful" if pol.stateful else "stateless", rollouts=n, stateless_passes=n,
                      workers=workers, env_kwargs=env_kwargs, agent_kwargs=params.get(pol.name, dict(pol.params)),
                      calibrate=False)
            for pol in policies]
    if not cfgs:
        return {}
    run_many(cfgs, quiet=True)
    task = cached_env(env_id, env_kwargs).unwrapped.task
    by_system: dict[str, list[float]] = {}
    for rec in load_records(out):
        if rec["task"] == task:
            by_system.setdefault(rec["system"], []).append(float(rec["reward"]))
    # fsum: exactly rounded whatever order the workers' records arrived in, so two points that tie, tie exactly
    # and the first in grid order is chosen on every run (np.mean's sum follows the records' order)
    return {name: math.fsum(rewards) / len(rewards) for name, rewards in by_system.items()}


def confirm(env_id: str, points: list[Policy], env_kwargs: dict, deals: list[int], workers: int, root: Path) -> None:
    """Play `points` and the stateless reference on each of `deals` (re-deals none was chosen on) and set each
    point's `held_out_lead`: its mean over them minus the reference's on the same instances."""
    if not points:
        return
    reference = Policy(REFERENCE, "generic", "reference", {})
    leads = {p.name: [] for p in points}
    for d in deals:
        means = _play(env_id, [*points, reference], {**env_kwargs, "redeal": d}, workers, root / f"redeal-{d}")
        for p in points:
            leads[p.name].append(means[p.name] - means[REFERENCE])
    for p in points:
        p.held_out_lead = float(np.mean(leads[p.name]))


def selection_deals(env_kwargs: dict, k: int) -> list[int]:
    """The `k` re-deals a family's point is chosen on: 1..k, skipping the deal under test (`redeal` in
    `env_kwargs`, 0 for the benchmark)."""
    own = int(env_kwargs.get("redeal", 0))
    return [d for d in range(1, k + 2) if d != own][:k]


def choose_on_redeals(env_id: str, policies: list[Policy], env_kwargs: dict, k: int, workers: int,
                      root: Path) -> list[dict]:
    """Play every family point of `policies` on `k` re-deals of the world (never the benchmark's own
    deal), record each point's per-re-deal means (`selection`) and mark the best point of each family
    (by the mean over the re-deals; the first in grid order on a tie) `chosen`. Returns the selection
    data: one {"policy", "redeal", "mean"} per point and re-deal."""
    deals = selection_deals(env_kwargs, k)
    by_family: dict[str, list[Policy]] = {}
    for pol in policies:
        if pol.family not in NOT_FAMILIES and not pol.skipped:
            by_family.setdefault(pol.family, []).append(pol)
    searched = [pol for fam in by_family.values() if len(fam) > 1 for pol in fam]
    data = []
    for d in deals:
        means = _play(env_id, searched, {**env_kwargs, "redeal": d}, workers, root / f"redeal-{d}")
        for pol in searched:
            if pol.name in means:
                pol.selection[d] = means[pol.name]
                data.append({"policy": pol.name, "redeal": d, "mean": means[pol.name]})
    for fam in by_family.values():
        scored = [p for p in fam if p.selection_mean is not None]
        best = fam[0] if len(fam) == 1 else max(scored, key=lambda p: p.selection_mean) if scored else None
        for pol in fam:
            pol.chosen = pol is best
    return data


def run(env_id: str, env_kwargs: dict | None = None, full: bool = False, workers: int = 1,
        policies: list[Policy] | None = None, out: str | None = None, k: int | None = None) -> dict:
    """Play the policies of `plan` (or `policies`) on the world and schedule `env_kwargs` select; for a
    redealable env, each family's point is first chosen on `k` re-deals (`redeals`, `choose_on_redeals`)
    and only the chosen points are played on the benchmark. Returns {"env_id", "world", "r_reference",
    "r_max", "rule", "redeals", "selection", "rows", "failures", "families"}."""
    from clbench.calibration import ensure_baselines, world_label
    from clbench.runner import cached_env

    env_kwargs = dict(env_kwargs or {})
    env = cached_env(env_id, env_kwargs)
    base = env.unwrapped
    undefined = ensure_baselines(env, env_kwargs)
    if undefined:
        raise ValueError(undefined)
    r_ref, r_max = base.r_reference, base.r_max
    policies = plan(env_id, full) if policies is None else policies
    k = redeals(full) if k is None else int(k)
    redealable = bool(type(base).redealable) and k > 0
    selection: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="clbench-redteam-") as tmp:
        root = Path(out or tmp)
        if redealable:
            selection = choose_on_redeals(env_id, policies, env_kwargs, k, workers, root / "select")
        params: dict[str, dict] = {}
        for pol in policies:
            if pol.name == TRAIN_ANSWERS and not pol.skipped:
                try:
                    params[pol.name] = {"actions": train_actions(env_id, env_kwargs, workers, root / "train")}
                except (RuntimeError, ValueError, TypeError) as exc:  # shown in the table, never hidden
                    pol.skipped = f"the oracle could not play the train split ({type(exc).__name__}: {str(exc)[:160]})"
            if pol.name == TRAIN_LEARNED and not pol.skipped:
                states = train_states(env_id, env_kwargs)
                if any(state is None for state in states.values()):
                    pol.skipped = "the reference keeps no state (state_dict() is None): nothing to carry over"
                else:
                    params[pol.name] = {"states": states}
        bench = [p for p in policies if not p.skipped and p.chosen is not False]
        means = _play(env_id, bench, env_kwargs, workers, root / "play", params)
        for pol in bench:
            pol.mean = means.get(pol.name)
        if redealable:
            confirm(env_id, [p for p in bench if p.chosen and reaches(p.mean, r_ref, p.tie_passes)], env_kwargs,
                    confirm_deals(env_kwargs, k, confirm_count(full)), workers, root / "confirm")
    rows = [p.row(r_ref, r_max) for p in policies]
    rule = (f"each family's point chosen on re-deals {', '.join(map(str, selection_deals(env_kwargs, k)))} (best mean), "
            "then played on the benchmark" if redealable else "every point played on the benchmark")
    band = world_band(env_id, env_kwargs)
    if band is not None:
        rule += (f"; a fresh world: a family point chosen on the world's own data may lead r_reference by up to "
                 f"{band:+.4g} (its band; the memoryless verdict is --pooled-worlds)")
        for r in rows:
            if r["family"] not in NOT_FAMILIES and r["mean"] is not None and not r["luck"] \
                    and reaches(r["mean"], r_ref, r["tie_passes"]):
                r["within_band"] = r["mean"] - r_ref <= band
                r["verdict"] = (f"within the fresh world's band ({r['mean'] - r_ref:+.4g} <= {band:+.4g})"
                                if r["within_band"] else f"ABOVE the fresh world's band ({r['mean'] - r_ref:+.4g})")
    return {"env_id": env_id, "world": world_label(base), "r_reference": r_ref, "r_max": r_max, "rule": rule,
            "redeals": k if redealable else 0, "selection": selection, "rows": rows,
            "families": sorted(families(type(base))), "world_band": band,
            "failures": [r for r in rows if reaches(r["mean"], r_ref, r["tie_passes"]) and not r["luck"]
                         and not r["within_band"]]}


def world_band(env_id: str, env_kwargs: dict) -> float | None:
    """How far above r_reference a family point chosen on a fresh world's own data may come (the env's
    `FreshWorldJudge.world_band`), on a fresh world (`world_seed`) of an env that has a judge; None otherwise (the
    canonical world, or no judge: every point is held to r_reference)."""
    if env_kwargs.get("world_seed") is None:
        return None
    judge = fresh_world_judge(env_id)
    return None if judge is None else judge.world_band


def format_table(report: dict) -> str:
    """The red team's table as markdown: the policies played on the benchmark first (best first), then
    the family points not chosen on the re-deals (best selection mean first)."""
    def order(r):
        played = r["mean"] is not None
        return (not played, -(r["mean"] if played else (r["selection_mean"] if r["selection_mean"] is not None
                                                         else -np.inf)))

    def num(x):
        return "-" if x is None else f"{x:.6g}"

    lines = [f"{report['env_id']} ({report['world']}): r_reference {report['r_reference']:.6g}, "
             f"r_max {report['r_max']:.6g}; families: {', '.join(report['families']) or 'NONE DECLARED'}; "
             f"rule: {report.get('rule', 'every point played on the benchmark')}",
             "| policy | family | params | selection mean (re-deals) | benchmark mean | r_reference | r_max | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(report["rows"], key=order):
        params = ", ".join(f"{k}={v}" for k, v in r["params"].items()) or "-"
        lines.append(f"| {r['policy']}{' (stateful)' if r['stateful'] else ''} | {r['family']} | {params} | "
                     f"{num(r.get('selection_mean'))} | {num(r['mean'])} | {report['r_reference']:.6g} | "
                     f"{report['r_max']:.6g} | {r['verdict']} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- the generic adversaries
class ReplayAgent(Agent):
    """Replays, on each instance, the actions recorded for its id (`actions`: id -> replies), then
    the empty reply: blind, memoryless. With the train oracle's actions it is `train-answers`."""

    name = "replay"
    deterministic = True

    def __init__(self, card, seed: int = 0, latent=None, actions: dict | None = None):
        super().__init__(card, seed=seed)
        self.actions = dict(actions or {})
        self._queue: list[str] = []

    def begin_instance(self, observation: str, info: dict) -> None:
        self._queue = list(self.actions.get(info["instance_id"], []))

    def act(self, observation: str, info: dict) -> str:
        return self._queue.pop(0) if self._queue else ""


class TrainLearned(Agent):
    """`train-learned`: per instance a fresh stateful reference of the env, loaded with `states[variant]` (what
    it had learned by the end of that variant on the train split, `train_states`) and frozen from the start
    (`freeze_at=0`): it applies what the train split taught and learns nothing on the test split."""

    name = "train-learned"

    def __init__(self, card, seed: int = 0, latent=None, states: dict | None = None):
        from clbench.agent import agent_table, load_object
        from clbench.registry import env_class

        super().__init__(card, seed=seed)
        self.states = dict(states or {})
        self._cls = load_object(agent_table(env_class(card["env_id"]))["reference"])
        self._inner: Agent | None = None

    def begin_instance(self, observation: str, info: dict) -> None:
        self._inner = self._cls(self.card, seed=self.seed, latent=None, freeze_at=0)
        state = self.states.get(info["variant"])
        if state is not None:
            self._inner.load_state_dict(state)
        self._inner.begin_instance(observation, info)

    def act(self, observation: str, info: dict) -> str:
        return self._inner.act(observation, info)

    def end_instance(self, reward: float, info: dict, observation: str = "") -> None:
        from clbench.agent import end_instance

        end_instance(self._inner, reward, info, observation)


class FeedbackMemorizer(Agent):
    """A stateful agent that learns from rewards only, never from what an observation says.

    Candidates are action sequences: the constant replies every adversary tries first (the env's
    degenerate answers, its first tool with the least arguments, the tool that ends an instance)
    and every sequence it played before. Each candidate is played once; afterwards, on each
    instance, the one with the best mean reward in this variant (overall, where this variant has
    not scored it). It remembers every terminal observation (`seen`),
    as a memorizer would, and replays an instance's own best sequence if the instance comes back.
    """

    name = "feedback-memorizer"
    deterministic = True

    def __init__(self, card, seed: int = 0, latent=None):
        super().__init__(card, seed=seed)
        from clbench.agents.degenerate import fixed_answers, tool_reply

        constants = [*fixed_answers(card.env_id).values()]
        tools = list(card.tools or [])
        if tools:
            constants.append(tool_reply(tools[0]))
            ending = [t for t in tools if t["function"]["name"].startswith("submit") or t["function"]["name"] == "answer"]
            if ending:
                constants.append(tool_reply(ending[0]))
        self.candidates: list[list[str]] = []
        for c in constants:
            if [c] not in self.candidates:
                self.candidates.append([c])
        self.scores: dict[str, dict[str, list[float]]] = {}  # variant ("*": all) -> candidate key -> rewards
        self.by_instance: dict[str, tuple[float, list[str]]] = {}
        self.seen: list[str] = []
        self._plan: list[str] = []
        self._played: list[str] = []

    @staticmethod
    def _key(seq: list[str]) -> str:
        return "\x1e".join(seq)

    def _choose(self, info: dict) -> list[str]:
        iid, variant = info["instance_id"], info["variant"]
        if iid in self.by_instance:  # the instance came back: its own best
            return list(self.by_instance[iid][1])
        everywhere = self.scores.setdefault("*", {})
        for cand in self.candidates:  # each candidate once, then exploit
            if self._key(cand) not in everywhere:
                return list(cand)
        here = self.scores.get(variant, {})

        def value(key: str) -> tuple[float, int]:  # this variant's mean where known, else the overall mean
            rewards = here.get(key) or everywhere[key]
            return float(np.mean(rewards)), -len(key)

        return max((list(c) for c in self.candidates), key=lambda c: value(self._key(c)))

    def begin_instance(self, observation: str, info: dict) -> None:
        self._plan, self._played = self._choose(info), []

    def act(self, observation: str, info: dict) -> str:
        action = self._plan.pop(0) if self._plan else ""
        self._played.append(action)
        return action

    def end_instance(self, reward: float, info: dict, observation: str = "") -> None:
        self.seen.append(observation)
        seq, key = list(self._played), self._key(self._played)
        for where in (info["variant"], "*"):
            self.scores.setdefault(where, {}).setdefault(key, []).append(float(reward))
        if [*seq] not in self.candidates:
            self.candidates.append(seq)
        best = self.by_instance.get(info["instance_id"])
        if best is None or reward > best[0]:
            self.by_instance[info["instance_id"]] = (float(reward), seq)

    def state_dict(self) -> dict:
        return {"candidates": self.candidates, "scores": self.scores, "seen": self.seen,
                "by_instance": {k: [r, s] for k, (r, s) in self.by_instance.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.candidates, self.scores, self.seen = state["candidates"], state["scores"], state["seen"]
        self.by_instance = {k: (float(r), list(s)) for k, (r, s) in state["by_instance"].items()}
