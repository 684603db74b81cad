"""`clbench calibrate --env ID [--write]`: r_max (oracle) and r_reference (stateless reference) on
the default schedule, computed by playing them; then the mean of every degenerate agent
(clbench.agents.degenerate), which must not beat r_reference.

`--world-seed N` and `--env-arg schedule=NAME` calibrate another world or schedule: its numbers go
to the calibration cache (clbench.calibration.store_baselines), never into default.yaml.

`--write` puts the two numbers into the task's tasks/<task>/default.yaml, the file
`clbench.env.load_task_spec` reads (the installed package data or a $CLBENCH_PATH root): only the
`r_max:` and `r_reference:` lines change (or are appended), comments and everything else stay as
they are; the diff is printed, and load_task_spec's cache is cleared so this process sees them.
"""
from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

import numpy as np

#: the keys `--write` sets, in the order they are appended
KEYS = ("r_max", "r_reference")


def stateless_means(env_id: str, agents: list[str], env_kwargs: dict | None = None, seed: int = 0,
                    instances: list[str] | None = None) -> dict[str, float]:
    """Mean reward of each agent played stateless (a fresh agent per instance) on every instance
    of the schedule, or on `instances` (ids) only, in every deal the benchmark plays (rollout seeds
    0..deals-1: an env that deals each rollout its own instances); one env serves all agents."""
    return {agent: float(np.mean(r)) for agent, r in stateless_rewards(env_id, agents, env_kwargs, seed,
                                                                        instances).items()}


def stateless_rewards(env_id: str, agents: list[str], env_kwargs: dict | None = None, seed: int = 0,
                      instances: list[str] | None = None, deals: list[int] | None = None) -> dict[str, list[float]]:
    """What `stateless_means` averages: each agent's rewards, instance by instance in the same order for
    every agent (deal by deal), so two agents' lists pair up. `deals`: only these of the benchmark's deals
    (each plays on its own, e.g. one per process)."""
    from clbench.agent import make_agent
    from clbench.runner import make_env, play_instance

    env = make_env(env_id, **(env_kwargs or {}))
    try:
        ids = instances or [slot.instance_id for slot in env.unwrapped.schedule.order(0)]
        deals = range(env.unwrapped.deals) if deals is None else deals
        played = {}
        for agent in agents:
            rewards = []
            for deal, iid in ((d, i) for d in deals for i in ids):
                a = make_agent(agent, env, seed=seed)
                obs, info = env.reset(seed=deal, options={"instance": iid, "stateless": True})
                out = play_instance(env, a, obs, info, [])
                if out["error"]:
                    raise RuntimeError(f"{agent} failed on {iid}: {out['error']}")
                rewards.append(out["reward"])
            played[agent] = rewards
        return played
    finally:
        env.close()


def stateless_mean(env_id: str, agent: str, env_kwargs: dict | None = None, seed: int = 0) -> float:
    """Mean reward of `agent` played stateless (fresh agent per instance) on every instance."""
    return stateless_means(env_id, [agent], env_kwargs, seed)[agent]


def set_keys(text: str, values: dict[str, float], env_id: str = "") -> str:
    """`text` (a task YAML) with the top-level `key: value` line of each key set to its new value,
    keeping a trailing comment; keys not there yet are appended at the end. Nothing else changes."""
    missing = []
    for key, value in values.items():
        line = re.compile(rf"^{re.escape(key)}[ \t]*:[ \t]*(?P<value>[^#\n]*?)(?P<comment>[ \t]+#[^\n]*)?[ \t]*$",
                          re.MULTILINE)
        found = list(line.finditer(text))
        if len(found) > 1:
            raise ValueError(f"{key} is set {len(found)} times in the task spec; keep one line")
        if found:
            m = found[0]
            text = text[:m.start()] + f"{key}: {value!r}{m.group('comment') or ''}" + text[m.end():]
        else:
            missing.append(f"{key}: {value!r}")
    if missing:
        if text and not text.endswith("\n"):
            text += "\n"
        last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")
        if "calibrate" not in last:
            text += f"# computed by `clbench calibrate --env {env_id} --write` (checked by tests)\n"
        text += "\n".join(missing) + "\n"
    return text


def write_calibration(env_id: str, values: dict[str, float]) -> tuple[Path, str]:
    """Write r_max and r_reference into the env's default.yaml; returns (path, unified diff)."""
    import yaml

    from clbench.env import load_task_spec, task_spec_path
    from clbench.registry import env_class

    path = task_spec_path(env_class(env_id).task)
    old = path.read_text()
    new = set_keys(old, values, env_id)
    before, after = yaml.safe_load(old) or {}, yaml.safe_load(new)
    if {k: v for k, v in after.items() if k not in values} != {k: v for k, v in before.items() if k not in values} \
            or any(after.get(k) != v for k, v in values.items()):
        raise RuntimeError(f"editing {path} would change more than {', '.join(values)}; set them by hand")
    if new != old:
        tmp = path.with_name(f".{path.name}.calibrate-tmp")
        tmp.write_text(new)
        os.replace(tmp, path)  # atomic: a reader sees the old file or the new one
    load_task_spec.cache_clear()
    _forget_cached_envs(env_id)
    diff = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"{path} (before)", tofile=f"{path} (after)"))
    return path, diff


def _forget_cached_envs(env_id: str) -> None:
    """Envs this process cached for runs (clbench.runner.cached_env) hold the old numbers: drop them."""
    from clbench import runner

    for key in [k for k in runner._ENVS if k[0] == env_id]:
        try:
            runner._ENVS.pop(key).close()
        except Exception:  # noqa: BLE001 - closing a stale env must not fail the calibration
            pass


def warn_uncalibrated(env_id: str) -> None:
    """`clbench rollout`'s one line on stderr when the env has no r_max/r_reference yet (builds no env)."""
    import sys

    from clbench.env import is_calibrated, load_task_spec
    from clbench.registry import env_class

    try:
        spec = load_task_spec(env_class(env_id).task)
    except Exception:  # noqa: BLE001 - an unknown env is reported by the run's own checks
        return
    if not is_calibrated(spec):
        print(f"warning: {env_id} is uncalibrated (no r_max/r_reference): normalized metrics are undefined "
              f"until `clbench calibrate --env {env_id} --write`", file=sys.stderr)


def cmd_calibrate(args) -> int:
    from clbench.agents.degenerate import degenerate_agents
    from clbench.calibration import baseline_values, store_baselines, world_label
    from clbench.commands.rollout import env_kwargs_from_args
    from clbench.runner import make_env

    env_kwargs = env_kwargs_from_args(args)
    env = make_env(args.env, **env_kwargs)
    base = env.unwrapped
    canonical, label = base.baselines_from_spec, world_label(base)
    degenerate = [] if args.no_degenerate else degenerate_agents(args.env)
    try:
        played = stateless_rewards(args.env, ["oracle", "reference", *degenerate], env_kwargs)  # one env for all
        means = {agent: float(np.mean(r)) for agent, r in played.items()}
        values = baseline_values(base, played["oracle"], played["reference"])
        r_max, r_ref = values["r_max"], values["r_reference"]
        if not canonical:  # another world or schedule: its own baselines, cached (never default.yaml)
            stored = store_baselines(base, values)
    finally:
        env.close()
    print(f"{args.env}, {label}\nr_max: {r_max!r}\nr_reference: {r_ref!r}")
    if degenerate:
        print("degenerate agents (must not beat r_reference):")
    for name in degenerate:
        print(f"  {name}: {means[name]:.6g}{'  BEATS r_reference' if means[name] > r_ref else ''}")
    if r_max <= r_ref:
        print(f"warning: the oracle ({r_max:.6g}) does not beat the stateless reference ({r_ref:.6g}): "
              "normalized reward is undefined and the task shows no headroom")
    if not canonical:
        print(f"stored in the calibration cache: {stored}")
        if args.write:
            print("(--write applies to the canonical world's default schedule only: default.yaml is unchanged)")
    elif args.write:
        # r_max_se where the task keeps one (a noisy oracle): it moves with r_max
        written = {k: v for k, v in values.items() if k in KEYS or k in base.spec_data}
        path, diff = write_calibration(args.env, written)
        if diff:
            print(f"{diff.rstrip()}\nwrote {', '.join(written)} to {path}")
        else:
            print(f"{path} already holds these r_max and r_reference: nothing written")
    else:
        print(f"(not written: `clbench calibrate --env {args.env} --write` puts them into the task's default.yaml)")
    return 0


def register(sub) -> None:
    from clbench.commands.rollout import add_world_arguments

    p = sub.add_parser("calibrate", help="compute r_max and r_reference of an env on its default schedule "
                                         "(--write: into its tasks/<task>/default.yaml)")
    p.add_argument("--env", required=True)
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="env keyword argument, e.g. schedule=NAME (every world or schedule but the canonical "
                        "default is stored in the calibration cache)")
    add_world_arguments(p, calibrate=False)
    p.add_argument("--no-degenerate", action="store_true", help="skip the degenerate agents' means")
    p.add_argument("--write", action="store_true",
                   help="write r_max and r_reference into the task's default.yaml (only those two lines change)")
    p.set_defaults(func=cmd_calibrate)
