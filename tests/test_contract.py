"""The environment contract (docs/contract.md: "Environment contract", "Reward scale", "Honest scores"),
checked on EVERY registered env: each test is parametrized over `clbench_env_ids()`, so a new env,
in envs/ or through $CLBENCH_PATH, is covered with no edit here.

- `gymnasium.utils.env_checker.check_env`, and `render()` in "ansi" mode;
- the reset modes: `reset(seed=s)` starts rollout s, `reset()` moves on and raises
  ScheduleExhausted after the last instance unless the env was made with `cycle=True`,
  `reset(options={"instance": id or position, "stateless": True})` jumps, unknown options raise;
- determinism: two fresh envs, the same seed and the same actions give the same observations,
  rewards and info, whatever the global `random` / `numpy.random` state;
- the info keys on every step and the extra keys on the last, reward 0 before the last step and
  the return equal to the instance reward;
- the spec card's fields, agreeing with the env and with tasks/<task>/default.yaml;
- `step()` never raising on garbage (`action_space.sample()`);
- an instance id names the same problem in every rollout and in the stateless jump;
- degenerate agents never beat the stateless reference `r_reference`;
- the oracle's stateless mean on the default schedule is `r_max`, the stateless reference's is
  `r_reference`.

Env-specific constructor arguments that keep this fast, and the checks a task plays on a sample
of its default schedule, come from the one table FAST below (a new env needs no entry). Checks on
a sample run by default; the same check on the whole default schedule is marked `slow`
(tests/conftest.py: run it with CLBENCH_SLOW=1 or `-m slow`). An uncalibrated task (r_max None in
its spec card, until `clbench calibrate --env ID --write`) skips only the checks that need r_max
or r_reference, with that reason.
"""
from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import platformdirs
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.utils.passive_env_checker import env_render_passive_checker

import clbench  # noqa: F401  registers the envs
from clbench.agent import make_agent
from clbench.agents.degenerate import degenerate_agents
from clbench.env import SpecCard, ScheduleExhausted, load_task_spec, task_name
from clbench.registry import clbench_env_ids
from clbench.runner import play_instance
from clbench.sandbox import SandboxUnavailable

ENV_IDS = clbench_env_ids()

#: What keeps the contract checks fast, by task name; a task not listed here needs nothing.
#:   kwargs: constructor arguments of every env these checks make.
#:   sample: checks that by default play a sample of the default schedule (see `instances`) and
#:           the whole schedule only under the slow gate; for tasks whose instances take seconds
#:           to a minute each (a sandbox per step, a test suite per grading).
#:   slow:   checks that only the whole schedule can make (a mean no sample stands for): they run
#:           under the slow gate only.
FAST = {
    # a ~1000-product database instead of the default-scale build; every answer, and so r_max and
    # r_reference, is the same at every scale (tests/test_dbexplore.py checks the default scale, slow)
    "dbexplore": {"kwargs": {"scale": 0.02}},
    # bubblewrap: the Docker images may not be built. Grading runs the repository's test suite
    # (5-10 s per issue, the reference's ~12 s): 45 s for the oracle on all 19 issues, minutes for the
    # others. Its oracle scores 1.0 on every issue, so a sample can show r_max; resets are quick
    "coderepair": {"kwargs": {"backend": "bwrap"}, "sample": {"oracle", "degenerate", "play"},
                   "slow": {"reference"}},
    # the oracle plays 600 hands (five deals) in ~45 s; tests/test_calibration.py plays them by default
    # (r_max, r_max_se and the oracle's lead), so here they run with the slow tests only
    "poker": {"slow": {"oracle"}},
    # every shell command runs in bubblewrap: the degenerate agents take 17 s on all 12 years, the
    # reference's actions replayed 60 s; resets are quick, the oracle submits without a command and
    # the stateless reference takes ~15 s, so those checks play the whole schedule
    "salesforecast": {"kwargs": {"backend": "bwrap"}, "sample": {"degenerate", "play"}},
}

INFO_KEYS = {"instance_id", "position", "variant", "variant_position", "step", "steps_left"}
LAST_STEP_KEYS = {"instance_reward", "raw_metric", "solved"}
#: absolute tolerance of oracle == r_max and reference == r_reference (default.yaml holds them with
#: full float precision; only summation order may differ)
R_MAX_TOLERANCE = 1e-6


def short(env_id: str) -> str:
    return env_id.split("/")[-1]


def env_kwargs(env_id: str) -> dict:
    return dict(FAST.get(task_name(env_id), {}).get("kwargs", {}))


def listed(env_id: str, key: str, check: str) -> bool:
    return check in FAST.get(task_name(env_id), {}).get(key, ())


def scoped(check: str) -> list:
    """(env_id, scope) for every env: scope "all" plays the whole default schedule; a task whose
    `check` is sampled gets "sample" by default and "all" marked slow, one whose `check` is slow
    gets "all" marked slow only."""
    params = []
    for env_id in ENV_IDS:
        slow = pytest.param(env_id, "all", id=f"{short(env_id)}-all", marks=pytest.mark.slow)
        if listed(env_id, "slow", check):
            params.append(slow)
        elif listed(env_id, "sample", check):
            params += [pytest.param(env_id, "sample", id=f"{short(env_id)}-sample"), slow]
        else:
            params.append(pytest.param(env_id, "all", id=short(env_id)))
    return params


def instances(env, scope: str, variants: int | None = None) -> list[str]:
    """The default schedule's instance ids in canonical order, or for scope "sample" the first
    instance of each of the first `variants` variants (all variants by default)."""
    schedule = env.unwrapped.schedule
    if scope == "sample":
        return [v.instances[0].instance_id for v in schedule.variants[:variants]]
    return [slot.instance_id for slot in schedule.order(0)]


def fresh(env_id: str, **extra) -> gym.Env:
    """A new env (its first reset done, so that a missing sandbox skips here, not mid-check)."""
    try:
        env = gym.make(env_id, **env_kwargs(env_id), **extra)
        env.reset(seed=0)
    except SandboxUnavailable as exc:
        pytest.skip(f"{env_id}: no sandbox backend: {exc}")
    return env


#: the user's real cache, read at import, before conftest.py points XDG_CACHE_HOME at a temp dir
REAL_CACHE = os.environ.get("CLBENCH_CACHE_DIR") or platformdirs.user_cache_dir("clbench")


@pytest.fixture(autouse=True)
def _real_download_cache(monkeypatch):
    """CodeRepair's verified sdists and test venvs come from the user's cache, not conftest.py's
    per-session one (they are built once, by `clbench containers build`, and take minutes)."""
    monkeypatch.setenv("CLBENCH_CACHE_DIR", REAL_CACHE)


@pytest.fixture(scope="module")
def made():
    """One env per id for the module (building checkouts and databases is slow)."""
    envs: dict[str, gym.Env] = {}

    def make(env_id: str) -> gym.Env:
        if env_id not in envs:
            envs[env_id] = fresh(env_id)
        return envs[env_id]

    yield make
    for env in envs.values():
        env.close()


def calibrated_or_skip(base) -> None:
    if base.r_max is None or base.r_reference is None:
        pytest.skip(f"{base.env_id} is not calibrated (r_max {base.r_max}, r_reference {base.r_reference} in "
                    f"tasks/{base.task}/default.yaml): run `clbench calibrate --env {base.env_id} --write`")


def test_every_shipped_env_is_calibrated():
    """The skip above is for a contributor's env in the making: an env that ships with clbench (in
    the installed envs/ folder, not a $CLBENCH_PATH root) must be calibrated, or dropping r_max from
    its YAML would silently skip the oracle and degenerate-agent checks."""
    import clbench.envs
    from clbench.env import is_calibrated, task_spec_path

    shipped = Path(clbench.envs.__path__[0])
    for env_id in ENV_IDS:
        task = task_name(env_id)
        if (shipped / task).is_dir():
            assert is_calibrated(load_task_spec(task)), f"{env_id}: {task_spec_path(task)} lacks r_max/r_reference"


def stateless_rewards(env, agent: str, ids: list[str]) -> list[float]:
    """What `clbench calibrate` computes: `agent` played stateless (a fresh one per instance), in every
    deal the benchmark plays (rollout seeds 0..deals-1)."""
    rewards = []
    for deal, iid in ((d, i) for d in range(env.unwrapped.deals) for i in ids):
        a = make_agent(agent, env, seed=0)
        obs, info = env.reset(seed=deal, options={"instance": iid, "stateless": True})
        out = play_instance(env, a, obs, info, [])
        assert out["error"] is None, f"{agent} failed on {iid}: {out['error']}"
        rewards.append(out["reward"])
    return rewards


# ---------------------------------------------------------------------------------- Gymnasium
@pytest.mark.parametrize("env_id", ENV_IDS, ids=short)
def test_check_env(env_id, made):
    env = made(env_id)
    # the render check of check_env re-makes the env per render mode: done below on this env instead
    check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.parametrize("env_id", ENV_IDS, ids=short)
def test_render_ansi_returns_the_current_observation(env_id, made):
    base = made(env_id).unwrapped
    assert base.metadata["render_modes"] == ["ansi"]
    obs, _ = base.reset(seed=0)
    saved = base.render_mode
    try:
        assert base.render() is None  # made without a render mode
        base.render_mode = "ansi"
        env_render_passive_checker(base)
        assert base.render() == obs
        obs, *_ = base.step(base.action_space.sample())
        assert base.render() == obs
    finally:
        base.render_mode = saved


@pytest.mark.parametrize("env_id", ENV_IDS, ids=short)
def test_the_three_ways_in_and_no_step_before_reset(env_id):
    """`import clbench; gym.make(id)`, `gym.make("clbench:" + id)` and `gym.register_envs(clbench)`."""
    gym.register_envs(clbench)
    env = gym.make(f"clbench:{env_id}", **env_kwargs(env_id))  # made, not reset: no sandbox or data built
    try:
        assert env.unwrapped.env_id == env_id == env.spec.id
        assert isinstance(env.unwrapped, clbench.registry.env_class(env_id))
        with pytest.raises(gym.error.ResetNeeded):  # the env's own check, not only the wrapper's
            env.unwrapped.step("")
    finally:
        env.close()


# ---------------------------------------------------------------------------------- reset modes
@pytest.mark.parametrize("env_id, scope", scoped("reset_walk"))
def test_reset_seed_starts_a_rollout_and_reset_moves_on_until_exhausted(env_id, scope, made):
    env = made(env_id)
    base = env.unwrapped
    n = len(base.schedule)
    order = [s.instance_id for s in base.schedule.order(3)]
    obs, info = env.reset(seed=3)
    assert (info["instance_id"], info["position"], info["step"]) == (order[0], 0, 0)
    assert INFO_KEYS <= set(info) and info["steps_left"] == base.max_steps
    assert [s.instance_id for s in base.order] == order
    seen = [info["instance_id"]]
    if scope == "sample":  # two steps forward, then jump to the last instance
        for _ in range(min(2, n - 1)):
            seen.append(env.reset()[1]["instance_id"])
        assert seen == order[:len(seen)]
        env.reset(options={"instance": n - 1})
    else:
        while len(seen) < n:
            _, info = env.reset()
            assert info["position"] == len(seen)
            seen.append(info["instance_id"])
        assert seen == order
    with pytest.raises(ScheduleExhausted, match="cycle=True"):
        env.reset()
    _, info = env.reset(seed=0)  # a new rollout starts over
    assert (info["instance_id"], info["position"]) == (base.schedule.order(0)[0].instance_id, 0)


@pytest.mark.parametrize("env_id", ENV_IDS, ids=short)
def test_cycle_wraps_to_the_first_instance(env_id):
    env = fresh(env_id, cycle=True)
    try:
        order = env.unwrapped.schedule.order(2)
        env.reset(seed=2, options={"instance": len(order) - 1})
        _, info = env.reset()
        assert (info["instance_id"], info["position"]) == (order[0].instance_id, 0)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ENV_IDS, ids=short)
def test_the_schedule_permutes_within_variants_only(env_id, made):
    schedule = made(env_id).unwrapped.schedule
    canonical = schedule.order(0)
    assert [s.position for s in canonical] == list(range(len(schedule)))
    for seed in (1, 7):
        order = schedule.order(seed)
        assert [s.variant for s in order] == [s.variant for s in canonical]
        assert [s.variant_position for s in order] == [s.variant_position for s in canonical]
        for variant in schedule.variants:
            assert sorted(s.instance_id for s in order if s.variant == variant.name) == \
                sorted(i.instance_id for i in variant.instances)


@pytest.mark.parametrize("env_id", ENV_IDS, ids=short)
def test_reset_jumps_to_an_instance_by_id_or_position(env_id, made):
    env = made(env_id)
    base = env.unwrapped
    order = base.schedule.order(1)
    target = order[len(order) // 2]
    _, info = env.reset(seed=1, options={"instance": target.instance_id, "stateless": True})
    assert (info["instance_id"], info["position"], info["variant"], info["variant_position"]) == \
        (target.instance_id, target.position, target.variant, target.variant_position)
    assert info["step"] == 0 and base.rollout_seed == 1
    last = order[-1]
    _, info = env.reset(options={"instance": last.position})  # by position, within the current rollout
    assert (info["instance_id"], info["position"]) == (last.instance_id, last.position)
    _, info = env.reset(options={"instance": target.instance_id})  # by id, stateful (no seed: same rollout)
    assert info["position"] == target.position
    if target.position + 1 < len(order):  # and reset() moves on from where the jump landed
        _, info = env.reset()
        assert info["instance_id"] == order[target.position + 1].instance_id


@pytest.mark.parametrize("env_id", ENV_IDS, ids=short)
def test_reset_refuses_unknown_options_and_instances(env_id, made):
    env = made(env_id)
    env.reset(seed=0)
    n = len(env.unwrapped.schedule)
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"bogus": 1})
    with pytest.raises(ValueError, match="unknown instance id"):
        env.reset(options={"instance": "no-such-instance"})
    for bad in (n, -1, True):
        with pytest.raises(ValueError):
            env.reset(options={"instance": bad})


# ---------------------------------------------------------------------------------- steps
def play_reference(env_id: str, scope: str, global_seed: int) -> list[dict]:
    """A fresh env plays the reference agent stateful from reset(seed=5): every reset and step as
    a record. The global random state is set to `global_seed` first (it must not matter)."""
    random.seed(global_seed)
    np.random.seed(global_seed)
    env = fresh(env_id)
    try:
        agent = make_agent("reference", env, seed=5)
        n = 1 if scope == "sample" else len(env.unwrapped.schedule)
        records = []
        obs, info = env.reset(seed=5)
        for pos in range(n):
            if pos:
                obs, info = env.reset()
            records.append({"event": "reset", "observation": obs, "info": info})
            agent.begin_instance(obs, info)
            done = False
            while not done:
                action = agent.act(obs, info)
                obs, reward, terminated, truncated, info = env.step(action)
                done = terminated or truncated
                records.append({"event": "step", "action": action, "observation": obs, "reward": reward,
                                "terminated": terminated, "truncated": truncated, "info": info})
            agent.end_instance(reward, info)
        return records
    finally:
        env.close()


def replay(env_id: str, records: list[dict], global_seed: int) -> list[dict]:
    """The same actions on another fresh env, under another global random state."""
    random.seed(global_seed)
    np.random.seed(global_seed)
    env = fresh(env_id)
    try:
        out = []
        for rec in records:
            if rec["event"] == "reset":
                obs, info = env.reset(seed=5) if not out else env.reset()
                out.append({"event": "reset", "observation": obs, "info": info})
            else:
                obs, reward, terminated, truncated, info = env.step(rec["action"])
                out.append({"event": "step", "action": rec["action"], "observation": obs, "reward": reward,
                            "terminated": terminated, "truncated": truncated, "info": info})
        return out
    finally:
        env.close()


_PLAYED: dict[tuple[str, str], list[dict]] = {}


def reference_play(env_id: str, scope: str) -> list[dict]:
    """One reference rollout per env and scope for the module (the determinism test replays it)."""
    if (env_id, scope) not in _PLAYED:
        _PLAYED[(env_id, scope)] = play_reference(env_id, scope, global_seed=1)
    return _PLAYED[(env_id, scope)]


def comparable(records: list[dict]) -> str:
    return json.dumps(records, sort_keys=True, default=repr)


@pytest.mark.parametrize("env_id, scope", scoped("play"))
def test_same_seed_same_actions_same_observations_and_rewards(env_id, scope):
    first = reference_play(env_id, scope)
    again = replay(env_id, first, global_seed=99)
    assert len(again) == len(first)
    for a, b in zip(first, again):
        assert comparable([a]) == comparable([b]), f"{env_id}: differs at {a['event']} {a['info']}"


@pytest.mark.parametrize("env_id, scope", scoped("play"))
def test_info_on_every_step_and_the_instance_reward_on_the_last(env_id, scope, made):
    records = reference_play(env_id, scope)
    env = made(env_id).unwrapped
    max_steps = env.max_steps
    instances_played = 0
    for rec in records:
        info = rec["info"]
        assert env.observation_space.contains(rec["observation"])
        assert INFO_KEYS <= set(info), f"{env_id}: missing {INFO_KEYS - set(info)}"
        assert info["steps_left"] == max(0, max_steps - info["step"])
        if rec["event"] == "reset":
            start, episode, instances_played = info, [], instances_played + 1
            assert info["step"] == 0 and not LAST_STEP_KEYS & set(info)
            continue
        episode.append(rec)
        for key in ("instance_id", "position", "variant", "variant_position"):
            assert info[key] == start[key], key
        assert 1 <= info["step"] <= max_steps and isinstance(rec["reward"], float)
        if not (rec["terminated"] or rec["truncated"]):
            assert rec["reward"] == 0.0 and not LAST_STEP_KEYS & set(info)
            continue
        assert not (rec["terminated"] and rec["truncated"])
        assert LAST_STEP_KEYS <= set(info), f"{env_id}: missing {LAST_STEP_KEYS - set(info)}"
        assert info["instance_reward"] == rec["reward"] == sum(r["reward"] for r in episode)  # return == reward
        metric = info["raw_metric"]
        assert set(metric) == {"name", "value"} and isinstance(metric["name"], str) and metric["name"]
        assert isinstance(metric["value"], float) and np.isfinite(metric["value"])
        assert isinstance(info["solved"], bool)
        json.dumps(info)  # records are JSON lines
    assert instances_played == (1 if scope == "sample" else len(env.schedule))


@pytest.mark.parametrize("env_id", ENV_IDS, ids=short)
def test_step_never_raises_on_garbage(env_id, made):
    """What check_env steps with (action_space.sample()), many times and across instance ends;
    tests/test_fuzz.py fuzzes harder."""
    env = made(env_id)
    base = env.unwrapped
    base.action_space.seed(0)
    env.reset(seed=0)
    for _ in range(12):
        if base._done:  # an ended instance takes no more steps: a clear error, then the next one
            with pytest.raises(gym.error.ResetNeeded, match="reset"):
                env.step(base.action_space.sample())
            env.reset(options={"instance": 0})
        obs, reward, terminated, truncated, info = env.step(base.action_space.sample())
        assert isinstance(obs, str) and base.observation_space.contains(obs)
        assert isinstance(reward, float) and np.isfinite(reward) and INFO_KEYS <= set(info)
        if terminated or truncated:
            assert LAST_STEP_KEYS <= set(info)
        else:
            assert reward == 0.0


# ---------------------------------------------------------------------------------- spec card
@pytest.mark.parametrize("env_id", ENV_IDS, ids=short)
def test_spec_card(env_id, made):
    base = made(env_id).unwrapped
    card = base.spec_card
    spec = load_task_spec(base.task)
    assert isinstance(card, SpecCard) and tuple(card) == SpecCard.FIELDS
    assert json.loads(json.dumps(card)) == card.to_dict()  # a plain JSON object
    assert (card.env_id, card.task, card.schedule) == (env_id, task_name(env_id), "default")
    for field in ("brief", "reward", "feedback", "action_grammar"):
        assert isinstance(card[field], str) and card[field].strip(), field
        assert "{max_steps}" not in card[field], f"{field}: the budget placeholder was not filled in"
    assert card.max_steps == int(spec["max_steps"]) == base.max_steps >= 1
    assert card.r_max == spec.get("r_max") and card.r_reference == spec.get("r_reference")
    if card.r_max is not None and card.r_reference is not None:
        assert card.r_reference < card.r_max  # headroom
    played = base.schedule.order(0)  # what a rollout plays, against what the card says
    assert card.instances == len({s.instance_id for s in played}) == sum(v["instances"] for v in card.variants)
    assert [v["name"] for v in card.variants] == list(dict.fromkeys(s.variant for s in played))
    assert all(isinstance(v["description"], str) for v in card.variants)
    assert card.tools  # every env also accepts a JSON tool call
    for tool in card.tools:
        assert tool["type"] == "function" and tool["function"]["name"]
        assert tool["function"]["parameters"]["type"] == "object"
    assert base.env_id == env_id and base.task == task_name(env_id)


@pytest.mark.parametrize("env_id", ENV_IDS, ids=short)
def test_every_task_ships_random_reference_and_oracle(env_id, made):
    env = made(env_id)
    env.reset(seed=0)
    agents = {name: make_agent(name, env) for name in ("random", "reference", "oracle")}
    assert agents["oracle"].privileged  # oracles may read the truth and say so
    assert not agents["reference"].privileged and agents["reference"].latent is None
    assert not agents["random"].privileged


# ---------------------------------------------------------------------------------- honest scores
#: text that states where an instance sits in the rollout, not what the problem is
POSITIONAL = [
    (r"\b{p}\b(?=(?: of |/){n}\b)", "#"),  # "Scan 5 of 90", "Issue 5/19"
    (r"(?<=session ){p}\b(?= ===)", "#"),  # MemoryProbe's conversation markers
    # Poker announces an opponent at whichever of its hands comes first in the rollout's order
    (r"(?m)^(?:New opponent: .*|\S+ returns: you played \d+ hands against .*)\n", ""),
]


def fingerprint(observation: str, position: int, n: int) -> str:
    """An instance's first observation with its rollout position normalised away."""
    for pattern, replacement in POSITIONAL:
        observation = re.sub(pattern.format(p=position + 1, n=n), replacement, observation)
    return observation


@pytest.mark.parametrize("env_id, scope", scoped("instance_ids"))
def test_an_instance_id_names_the_same_problem_in_every_rollout_and_the_stateless_jump(env_id, scope, made):
    env = made(env_id)
    n = len(env.unwrapped.schedule)
    ids = instances(env, scope)
    seen: dict[str, dict[str, str]] = {}
    deals = env.unwrapped.deals  # an env that deals each rollout its own cards: the same problem within a deal
    for seed in (0, deals, 2 * deals) if deals > 1 else (0, 1, 2):
        obs, info = env.reset(seed=seed)
        for k, iid in enumerate(ids):
            if scope == "all":  # played in the rollout's order, as a stateful run reaches it
                if k:
                    obs, info = env.reset()
            else:
                obs, info = env.reset(options={"instance": iid})
            seen.setdefault(info["instance_id"], {})[f"rollout {seed}"] = fingerprint(obs, info["position"], n)
        if seed == max(1, deals):  # the stateless pass jumps within a permuted order
            for iid in ids:
                obs, info = env.reset(options={"instance": iid, "stateless": True})
                seen[iid]["stateless"] = fingerprint(obs, info["position"], n)
    assert set(seen) == set(ids)
    for iid, views in seen.items():
        first = next(iter(views.values()))
        differ = [k for k, v in views.items() if v != first]
        assert not differ, f"{env_id} {iid}: the first observation differs in {differ}"


def test_the_fingerprint_removes_the_position_only():
    env = gym.make("clbench/SpectrumMonitor-v6")
    env.reset(seed=0)
    a, ia = env.reset(options={"instance": "scan-001"})
    b, ib = env.reset(options={"instance": "scan-002"})
    assert "Scan 1 of 90" in a and "Scan # of 90" in fingerprint(a, ia["position"], 90)
    assert fingerprint(a, ia["position"], 90) != fingerprint(b, ib["position"], 90)


@pytest.mark.parametrize("env_id, scope", scoped("degenerate"))
def test_degenerate_agents_never_beat_the_stateless_reference(env_id, scope, made):
    env = made(env_id)
    base = env.unwrapped
    calibrated_or_skip(base)
    names = degenerate_agents(env_id)
    assert {"first-legal", "submit", "empty"} <= set(names)
    ids = instances(env, scope, variants=1)
    means = {name: float(np.mean(stateless_rewards(env, name, ids))) for name in names}
    print(f"\n{env_id}: r_reference {base.r_reference:.4g}, r_max {base.r_max:.4g}; "
          + ", ".join(f"{n} {m:.4g}" for n, m in means.items()))
    beaten = {n: m for n, m in means.items() if m > base.r_reference}
    assert not beaten, f"{env_id}: degenerate agents beat r_reference {base.r_reference}: {beaten}"


@pytest.mark.parametrize("env_id, scope", scoped("oracle"))
def test_the_oracle_scores_r_max(env_id, scope, made):
    """r_max is what the oracle attains, stateless, on the default schedule. A sample stands for
    the schedule only for a task whose oracle scores the same on every instance (FAST says which)."""
    env = made(env_id)
    base = env.unwrapped
    calibrated_or_skip(base)
    rewards = stateless_rewards(env, "oracle", instances(env, scope))
    assert float(np.mean(rewards)) == pytest.approx(base.r_max, abs=R_MAX_TOLERANCE), rewards


@pytest.mark.parametrize("env_id, scope", scoped("reference"))
def test_the_stateless_reference_scores_r_reference(env_id, scope, made):
    """r_reference, the fixed reference of normalized reward, is what the scripted reference
    attains played stateless on the default schedule."""
    env = made(env_id)
    base = env.unwrapped
    calibrated_or_skip(base)
    rewards = stateless_rewards(env, "reference", instances(env, scope))
    assert float(np.mean(rewards)) == pytest.approx(base.r_reference, abs=R_MAX_TOLERANCE)
