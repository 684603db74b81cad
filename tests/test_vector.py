"""Vector envs for training (issue 31): `gym.make_vec` over every env, sync and async, through
several instance boundaries, with every info field stackable across sub-envs and steps.

Before: Poker's `info["table"]` held an int in one sub-env and None in another, gymnasium could not
stack them, and after the error `AsyncVectorEnv.close()` hung. Sub-envs are made with
`cycle=True` (a training loop outlives one schedule); actions are the action space's random
strings, which most envs treat as invalid actions (instances end through the invalid-action cap
within a few steps), so every sub-env crosses instance boundaries.
"""
from __future__ import annotations

import os
import re
import threading

import gymnasium as gym
import pytest

import clbench  # noqa: F401 - registers the envs
from clbench.registry import clbench_env_ids, env_class

N = 3
STEPS = 40


def _vector_ids() -> list[str]:
    ids = []
    for eid in clbench_env_ids():
        cls = env_class(eid)
        if cls.runtime and os.environ.get("CLBENCH_SLOW") != "1":
            continue  # sandboxed repositories (CodeRepair): a step is a sandbox command; with CLBENCH_SLOW=1
        ids.append(eid)
    return ids


def _close_within(vec, seconds: float = 60) -> None:
    t = threading.Thread(target=vec.close, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the vector env's close() hung"


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("env_id", _vector_ids())
def test_make_vec_steps_every_env_through_instance_boundaries(env_id, mode):
    kwargs = {"vector_kwargs": {"shared_memory": False}} if mode == "async" else {}
    vec = gym.make_vec(env_id, N, vectorization_mode=mode, cycle=True, **kwargs)
    try:
        obs, info = vec.reset(seed=0)
        assert len(obs) == N and all(isinstance(o, str) and o for o in obs)
        seen = [{info["instance_id"][i]} for i in range(N)]
        vec.action_space.seed(0)
        for _ in range(STEPS):
            obs, reward, terminated, truncated, info = vec.step(vec.action_space.sample())
            assert len(obs) == N and reward.shape == (N,)
            for i in range(N):
                if "instance_id" in info and info.get("_instance_id", [True] * N)[i]:
                    seen[i].add(info["instance_id"][i])
        # every sub-env crossed a boundary (most envs several: random text is an invalid action there;
        # in SalesForecast's shell it is a command, so its instances end by the step budget)
        assert all(len(ids) >= 2 for ids in seen), seen
    finally:
        _close_within(vec)


#: env-specific actions (valid ones among them, so scored steps' infos stack too), cycled per step, with
#: the count of instance ends at least expected over ACTION_STEPS steps of a vector of N sub-envs
OWN_ACTIONS = {
    "spectrummonitor": (['not json', '{"transmitters": []}', '{"transmitters": []}'], 2 * N),
    "salesforecast": (["ls inbox", "SUBMIT {garbage", "SUBMIT {garbage", "SUBMIT {garbage", "echo hi"], N),
}
ACTION_STEPS = 10


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("env_id", [e for e in _vector_ids() if env_class(e).task in OWN_ACTIONS])
def test_make_vec_steps_with_each_envs_own_actions(env_id, mode):
    actions, ends_at_least = OWN_ACTIONS[env_class(env_id).task]
    kwargs = {"vector_kwargs": {"shared_memory": False}} if mode == "async" else {}
    vec = gym.make_vec(env_id, N, vectorization_mode=mode, cycle=True, schedule="short", **kwargs)
    try:
        vec.reset(seed=0)
        ends = 0
        for step in range(ACTION_STEPS):
            obs, reward, terminated, truncated, info = vec.step([actions[step % len(actions)]] * N)
            ends += int((terminated | truncated).sum())
            assert len(obs) == N and all(isinstance(o, str) for o in obs)
        assert ends >= ends_at_least and "instance_id" in info
    finally:
        _close_within(vec)


# --- clbench.vector.BatchedVectorEnv: several sub-envs per worker process (make_vec's vector_entry_point)

import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from gymnasium.vector import AutoresetMode  # noqa: E402

from clbench.vector import BatchedVectorEnv, LazyInfo, default_workers  # noqa: E402

BATCH_N, WORKERS = 5, 3  # the parent steps sub-envs 0-1, two worker processes 2-3 and 4: batching is exercised


def _same(a, b) -> bool:
    """Deep equality over what vector envs return (dicts, tuples, numpy arrays of objects)."""
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(
            _same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if getattr(a, "dtype", None) != getattr(b, "dtype", None) or np.shape(a) != np.shape(b):
            return False
    if isinstance(a, (np.ndarray, list, tuple)) or isinstance(b, (np.ndarray, list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b) or (a != a and b != b)  # NaN equals NaN here


def _garbage(rng) -> str:
    """Random words without shell-special characters: in SalesForecast's shell, `$$` and the like
    expand to process-dependent values, which would differ between any two processes."""
    return "".join(rng.choice(list("abcdefxyz 0123456789"), size=int(rng.integers(1, 30))))


def _pid_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has ended; only its reaper is late
    except FileNotFoundError:
        return True


def _wait_gone(pids: list[int], seconds: float = 30) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in pids if not _pid_gone(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return alive


@pytest.mark.parametrize("workers", [WORKERS, 1], ids=["3-processes", "parent-only"])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.name)
@pytest.mark.parametrize("env_id", _vector_ids())
def test_batched_vector_matches_sync_through_instance_boundaries(env_id, mode, workers):
    """The batched vector gives SyncVectorEnv's observations, rewards, ends and infos step by step,
    seed for seed, in both autoreset modes, while every sub-env crosses instance boundaries: with
    worker processes and with every sub-env in the parent (the default on 2 CPUs), through the fast
    paths (sub-envs called inside gym.make's wrappers once these only forward, infos stacked when read)."""
    vec = gym.make_vec(env_id, BATCH_N, vectorization_mode="vector_entry_point", cycle=True, workers=workers,
                       autoreset_mode=mode)
    ref = gym.make_vec(env_id, BATCH_N, vectorization_mode="sync", cycle=True, vector_kwargs={"autoreset_mode": mode})
    try:
        assert isinstance(vec.unwrapped, BatchedVectorEnv) and vec.unwrapped.workers == workers
        assert len(vec.unwrapped.worker_pids) == workers - 1
        assert vec.metadata["autoreset_mode"] == mode
        assert vec.observation_space == ref.observation_space and vec.action_space == ref.action_space
        obs, info = vec.reset(seed=0)
        ref_obs, ref_info = ref.reset(seed=0)
        assert _same(obs, ref_obs) and _same(info, ref_info)
        seen = [{info["instance_id"][i]} for i in range(BATCH_N)]
        rng = np.random.default_rng(0)
        for t in range(STEPS):
            action = tuple(_garbage(rng) for _ in range(BATCH_N))
            got, want = vec.step(action), ref.step(action)
            for name, x, y in zip(("obs", "reward", "terminated", "truncated", "info"), got, want):
                assert _same(x, y), f"step {t}: {name} differs from SyncVectorEnv"
            info = got[4]
            assert type(info) is LazyInfo
            for i in range(BATCH_N):
                if info.get("_instance_id", [False] * BATCH_N)[i]:
                    seen[i].add(info["instance_id"][i])
            if mode == AutoresetMode.SAME_STEP and (got[2] | got[3]).any():
                assert "final_obs" in info
        assert all(len(ids) >= 2 for ids in seen), seen
        assert all(vec.unwrapped._local._direct)  # the fast path was taken after the wrappers' checks
    finally:
        ref.close()
        _close_within(vec)


def test_make_vec_defaults_to_the_batched_vector():
    vec = gym.make_vec("clbench/MemoryProbe-v2", 3)
    try:
        assert isinstance(vec.unwrapped, BatchedVectorEnv)
        assert len(vec.reset(seed=1)[0]) == 3
        assert vec.get_attr("world_key") == ("canonical",) * 3
        vec.reset(seed=2, options={"reset_mask": np.array([False, True, False])})
    finally:
        _close_within(vec)


class _Faulty(gym.Env):
    """A text env whose step raises on the action "boom" (stands for a bug in a sub-env)."""

    observation_space = gym.spaces.Text(10)
    action_space = gym.spaces.Text(10)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "ready", {}

    def step(self, action):
        if action == "boom":
            raise ValueError("the sub-env broke")
        return "ok", 0.0, False, False, {}


gym.register("clbench_test/Faulty-v0", entry_point=_Faulty, disable_env_checker=True)


@pytest.mark.parametrize("in_parent", [True, False], ids=["parent-steps-a-shard", "workers-only"])
@pytest.mark.parametrize("index", [0, 1, 3, 4])  # first/last sub-env of a shard
def test_error_in_a_sub_env_is_raised_with_its_index_and_close_does_not_hang(index, in_parent):
    vec = BatchedVectorEnv("clbench_test/Faulty-v0", 5, workers=3, in_parent=in_parent)
    pids = vec.worker_pids
    vec.reset(seed=0)
    vec.step(("x",) * 5)
    actions = ["x"] * 5
    actions[index] = "boom"
    with pytest.raises(ValueError, match=rf"sub-env {index}: ValueError: the sub-env broke") as err:
        vec.step(tuple(actions))
    assert err.value.env_index == index
    _close_within(vec, 30)
    assert _wait_gone(pids) == []
    with pytest.raises(RuntimeError, match="closed"):
        vec.step(("x",) * 5)


def test_workers_are_gone_after_close():
    vec = gym.make_vec("clbench/SpectrumMonitor-v6", 4, vectorization_mode="vector_entry_point", workers=3)
    pids = vec.unwrapped.worker_pids
    assert len(pids) == 2 and not any(_pid_gone(p) for p in pids)
    vec.reset(seed=0)
    _close_within(vec, 30)
    assert _wait_gone(pids) == []


def test_workers_die_with_a_sigkilled_parent():
    script = ("import gymnasium as gym, clbench, sys, time\n"
              "v = gym.make_vec('clbench/MemoryProbe-v2', 4, vectorization_mode='vector_entry_point', workers=3)\n"
              "v.reset(seed=0)\n"
              "print(*v.unwrapped.worker_pids, flush=True)\n"
              "time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and not any(_pid_gone(p) for p in pids)
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        assert _wait_gone(pids) == [], "vector workers outlived their SIGKILLed parent"
    finally:
        parent.kill()
        parent.wait()


def test_stacked_infos_equal_gymnasiums_add_info():
    """The key-by-key stacking gives what `_add_info` gives info by info, dtypes included, also for
    mixed types, arrays, missing keys, nested dicts and a key that is a dict in one sub-env only."""
    vec = BatchedVectorEnv("clbench_test/Faulty-v0", 4, workers=1)
    try:
        cases = [
            [(0, {"a": 1, "b": "x"}), (2, {"a": 2.7, "c": None}), (3, {"b": None, "a": True})],
            [(1, {"v": np.arange(3.0)}), (2, {"v": np.ones(3)})],
            [(0, {"final_obs": "o", "final_info": {"k": 1}}), (0, {"k": 2}), (3, {"final_obs": "p",
                                                                             "final_info": {"k": 3.5}})],
            [(0, {"n": {"x": 1, "y": {"z": "q"}}}), (1, {"n": {"x": 2}}), (2, {"m": np.float32(1.5)})],
            [(0, {"t": (1, 2)}), (1, {"t": [3]}), (3, {"t": 7})],
            [(0, {"d": {"x": 1}}), (1, {"e": 1}), (2, {"d": 5})],  # a dict in one sub-env only: the exact way
            # every sub-env reports the key (one numpy call when all values share a type)
            [(i, {"s": f"x{i}", "n": i, "f": i / 2, "b": i % 2 == 0, "m": [1, 2 + i][i % 2], "t": (i,)})
             for i in range(4)],
            [(i, {"x": [1, 2.5, True, np.float32(2)][i], "y": [2.5, 1, 3, 4][i]}) for i in range(4)],  # casts
            [(i, {"final_obs": i, "final_info": {"k": i}}) for i in range(4)],  # final_obs stays objects
            [(i, {"final_obs": "o", "n": np.int8(i)}) for i in range(4)] + [(0, {"n": np.int8(9)})],  # a repeat
        ]
        for pairs in cases:
            want: dict = {}
            try:
                for i, info in pairs:
                    want = vec._add_info(want, info, i)
            except Exception as exc:  # noqa: BLE001 - then the stacking must fail alike
                with pytest.raises(type(exc)):
                    vec._stack(pairs)
                continue
            assert _same(vec._stack(pairs), want), pairs
    finally:
        _close_within(vec)


# --- the step path's fast paths: infos stacked when read, sub-envs called inside forwarding wrappers

@pytest.mark.parametrize("workers", [2, 1], ids=["2-processes", "parent-only"])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.name)
def test_lazy_infos_equal_infos_stacked_in_step(mode, workers):
    """Step by step, the lazy info read late (after the next step) equals the one stacked in step(),
    also when a worker's infos (and SAME_STEP's finals) come pickled and are unpickled only when read."""
    kw = dict(cycle=True, workers=workers, autoreset_mode=mode, schedule="short")
    lazy = BatchedVectorEnv("clbench/SpectrumMonitor-v6", 4, **kw)
    eager = BatchedVectorEnv("clbench/SpectrumMonitor-v6", 4, lazy_info=False, **kw)
    try:
        lazy.reset(seed=3)
        eager.reset(seed=3)
        actions = ['{"transmitters": []}', "not json", '{"transmitters": []}', "x"]
        held = []
        for t in range(12):
            action = tuple(actions[(t + k) % 4] for k in range(4))
            got, want = lazy.step(action), eager.step(action)
            assert type(got[4]) is LazyInfo and type(want[4]) is dict
            assert _same(got[:4], want[:4])
            held.append((got[4], want[4]))
        for t, (late, now) in enumerate(held):  # read only now, many steps later
            assert _same(late, now), t
    finally:
        _close_within(lazy)
        _close_within(eager)


def test_lazy_info_behaves_as_the_dict_it_stands_for():
    """Every use builds it first, json's C encoder included (it reads a dict's size before its items:
    an unbuilt info must never serialize as an empty one)."""
    import copy
    import json
    import pickle

    built = []

    def build(arg):
        built.append(arg)
        return {"a": 1, "_a": True, "n": {"x": "y"}}

    plain = build(None)
    built.clear()
    uses = [len, bool, list, dict, repr, str, sorted, lambda d: {**d}, lambda d: "a" in d, lambda d: d["n"],
            lambda d: d.get("a"), lambda d: list(d.items()), lambda d: list(d.values()), lambda d: d == plain,
            lambda d: d != plain, lambda d: d | {"b": 2}, lambda d: {"b": 2} | d, lambda d: json.dumps(dict(d)),
            json.dumps, lambda d: json.dumps({"info": d}, sort_keys=True),
            lambda d: pickle.loads(pickle.dumps(d)), copy.copy, copy.deepcopy, lambda d: d.copy(),
            lambda d: list(reversed(d)), lambda d: (lambda **kw: kw)(**d),
            lambda d: d == LazyInfo.deferred(build, "other")]
    for use in uses:
        lazy = LazyInfo.deferred(build, "arg")
        want = use(dict(plain))
        got = use(lazy)
        assert got == want or (use is uses[-1] and got is True), use
        assert "arg" in built and len(dict.keys(lazy)) == 3  # built on first use, then a plain dict inside
        built.clear()
    lazy = LazyInfo.deferred(build, "arg")
    assert type(pickle.loads(pickle.dumps(lazy))) is dict and type(copy.deepcopy(lazy)) is dict
    lazy["b"] = 2
    assert lazy.pop("a") == 1 and dict(lazy) == {"_a": True, "n": {"x": "y"}, "b": 2} and len(built) == 1


class _Drifting(_Faulty):
    """An info key that is an int on odd steps and None on even ones (the reset seed is the step
    count to start from): sub-envs out of phase give infos gymnasium cannot stack."""

    def reset(self, *, seed=None, options=None):
        self.t = seed or 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.t += 1
        return "ok", 0.0, False, False, {"k": 1 if self.t % 2 else None}


gym.register("clbench_test/Drifting-v0", entry_point=_Drifting, disable_env_checker=True)


def test_unstackable_infos_raise_where_they_are_read():
    """SyncVectorEnv raises in step(); the lazy info raises the same error where it is read (the step
    itself completes); lazy_info=False raises in step()."""
    sync = gym.make_vec("clbench_test/Drifting-v0", 2, vectorization_mode="sync")
    lazy = BatchedVectorEnv("clbench_test/Drifting-v0", 2, workers=1)
    eager = BatchedVectorEnv("clbench_test/Drifting-v0", 2, workers=1, lazy_info=False)
    try:
        for vec in (sync, lazy, eager):
            vec.reset(seed=0)  # sub-env 0 from step 0, sub-env 1 from step 1
        with pytest.raises(TypeError) as want:
            sync.step(("x", "x"))
        info = lazy.step(("x", "x"))[4]
        with pytest.raises(type(want.value), match=re.escape(str(want.value))):
            info["k"]
        with pytest.raises(type(want.value), match=re.escape(str(want.value))):
            eager.step(("x", "x"))
    finally:
        for vec in (sync, lazy, eager):
            vec.close()


class _Timed(_Faulty):
    pass


gym.register("clbench_test/Timed-v0", entry_point=_Timed, max_episode_steps=3, disable_env_checker=True)


def test_sub_envs_are_called_directly_only_inside_wrappers_that_forward():
    """gym.make's OrderEnforcing and PassiveEnvChecker only forward once checked: the fast path calls the
    env inside them. Any other wrapper (here TimeLimit, which ends instances) is kept: every step goes
    through it, and its truncations come out as SyncVectorEnv's do."""
    plain = BatchedVectorEnv("clbench/MemoryProbe-v2", 2, workers=1)
    timed = BatchedVectorEnv("clbench_test/Timed-v0", 2, workers=1)
    ref = gym.make_vec("clbench_test/Timed-v0", 2, vectorization_mode="sync")
    try:
        plain.reset(seed=0)
        assert not any(plain._local._direct)
        for _ in range(3):
            plain.step(("x", "x"))
        assert all(plain._local._direct) and plain._local.calls == [e.unwrapped for e in plain._local.envs]
        timed.reset(seed=0)
        ref.reset(seed=0)
        for t in range(7):
            got, want = timed.step(("x", "x")), ref.step(("x", "x"))
            assert _same(got, want), t
        assert not any(timed._local._direct) and timed._local.calls == timed._local.envs
    finally:
        for vec in (plain, timed, ref):
            vec.close()


@pytest.mark.parametrize("index", [0, 4])
def test_error_in_a_sub_env_of_a_parent_only_vector(index):
    vec = BatchedVectorEnv("clbench_test/Faulty-v0", 5, workers=1)
    assert vec.worker_pids == []
    vec.reset(seed=0)
    actions = ["x"] * 5
    actions[index] = "boom"
    with pytest.raises(ValueError, match=rf"sub-env {index}: ValueError: the sub-env broke") as err:
        vec.step(tuple(actions))
    assert err.value.env_index == index and vec.closed
    with pytest.raises(RuntimeError, match="closed"):
        vec.step(("x",) * 5)


def test_default_workers_follow_the_declared_step_cost(monkeypatch):
    """Cheap steps stay in the parent, expensive ones get worker processes when there are CPUs: the
    choice follows the declared cost per step (not a timing), the CPU count and the vector's size."""
    from clbench import vector

    cheap, dear = vector.STEP_SECONDS["dbexplore"], vector.STEP_SECONDS["memoryprobe"]
    assert default_workers(8, cheap, cpus=2) == default_workers(8, cheap, cpus=64) == 1
    assert default_workers(8, None, cpus=64) == 1  # nothing declared: cheap
    assert default_workers(8, dear, cpus=1) == 1 and default_workers(8, dear, cpus=2) == 2
    assert default_workers(8, dear, cpus=64) == int(8 * dear / vector.WORKER_MIN_SECONDS) >= 2  # each >= 1 ms
    assert default_workers(2, dear, cpus=64) == 1  # two sub-envs' steps do not pay for a process
    assert default_workers(8, 1.0, cpus=4) == 4 and default_workers(3, 1.0, cpus=64) == 3
    assert vector.step_seconds("clbench/DBExplore-v3") == cheap
    assert vector.step_seconds("clbench/MemoryProbe-v2") == dear
    assert vector.step_seconds("clbench_test/Faulty-v0") is None

    monkeypatch.setattr(vector, "available_cpus", lambda: 2)
    for env_id, workers in (("clbench/MemoryProbe-v2", 2), ("clbench/SpectrumMonitor-v6", 2), ("clbench/DBExplore-v3", 1)):
        vec = gym.make_vec(env_id, 8)
        try:
            assert vec.unwrapped.workers == workers and len(vec.unwrapped.worker_pids) == workers - 1
            assert vec.unwrapped.step_seconds == vector.step_seconds(env_id)
        finally:
            _close_within(vec)
    monkeypatch.setattr(vector, "available_cpus", lambda: 1)
    vec = BatchedVectorEnv("clbench/MemoryProbe-v2", 8)
    try:
        assert vec.workers == 1 and vec.worker_pids == []
    finally:
        vec.close()


def test_free_cpus_count_the_load(monkeypatch):
    """A worker process gains only on a free CPU: the CPUs allowed, less the busy ones (load average)."""
    from clbench import vector

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    for load, free in ((0.0, 2), (1.0, 2), (1.2, 2), (1.6, 1), (9.5, 1)):
        monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
        assert vector.available_cpus() == free, load
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(os, "getloadavg", lambda: (3.4, 0.0, 0.0))
    assert vector.available_cpus() == 14
    assert default_workers(8, vector.STEP_SECONDS["memoryprobe"]) == 7  # each keeps 0.4 ms of 2.8 ms
    assert default_workers(8, vector.STEP_SECONDS["cohortstudies"]) == 8
    monkeypatch.setattr(os, "getloadavg", lambda: (16.2, 0.0, 0.0))
    assert default_workers(8, vector.STEP_SECONDS["cohortstudies"]) == 1


class _Declared(_Faulty):
    vector_step_seconds = 0.01


gym.register("clbench_test/Declared-v0", entry_point=_Declared, disable_env_checker=True)


def test_an_env_class_declares_its_own_step_cost(monkeypatch):
    from clbench import vector

    assert vector.step_seconds("clbench_test/Declared-v0") == 0.01
    monkeypatch.setattr(vector, "available_cpus", lambda: 3)
    vec = BatchedVectorEnv("clbench_test/Declared-v0", 4)
    try:
        assert vec.workers == 3 and len(vec.worker_pids) == 2
    finally:
        _close_within(vec)


def test_every_env_declares_its_step_cost():
    """An env without a declared cost would get the parent alone; every registered env says its own."""
    from clbench import vector

    missing = [eid for eid in clbench_env_ids() if vector.step_seconds(eid) is None]
    assert not missing, f"declare these envs' step cost (vector_step_seconds or clbench.vector.STEP_SECONDS): {missing}"


@pytest.mark.parametrize("workers", [WORKERS, 1], ids=["3-processes", "parent-only"])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.name)
def test_sub_envs_ending_at_different_steps_and_masked_resets_match_sync(mode, workers):
    """Sub-envs whose instances end at different steps (an answer ends one at once, invalid replies
    after three), so a step mixes steps and resets within a shard and across shards, and resets
    with a mask in between: step by step what SyncVectorEnv gives."""
    env_id = "clbench/MemoryProbe-v2"
    vec = BatchedVectorEnv(env_id, BATCH_N, workers=workers, autoreset_mode=mode, cycle=True)
    ref = gym.make_vec(env_id, BATCH_N, vectorization_mode="sync", cycle=True, vector_kwargs={"autoreset_mode": mode})
    try:
        assert _same(vec.reset(seed=4), ref.reset(seed=4))
        ends, mixed = 0, 0
        for t in range(30):
            if t in (7, 18):
                mask = np.array([(i + t) % 2 == 0 for i in range(BATCH_N)])
                assert _same(vec.reset(seed=t, options={"reset_mask": mask}),
                             ref.reset(seed=t, options={"reset_mask": mask})), t
            action = tuple("ANSWER Q1: 0" if (i + t) % 3 == 0 else f"x{t}" for i in range(BATCH_N))
            got, want = vec.step(action), ref.step(action)
            for name, x, y in zip(("obs", "reward", "terminated", "truncated", "info"), got, want):
                assert _same(x, y), f"step {t}: {name} differs from SyncVectorEnv"
            done = got[2] | got[3]
            ends += int(done.sum())
            mixed += bool(done.any() and not done.all())
        assert ends >= 2 * BATCH_N and mixed >= 5
    finally:
        ref.close()
        _close_within(vec)


class _BreaksOnReset(_Faulty):
    """Every step ends the instance; the reset after the action "boom" raises."""

    def reset(self, *, seed=None, options=None):
        if getattr(self, "broken", False):
            raise ValueError("the sub-env broke")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.broken = action == "boom"
        return "ok", 0.0, True, False, {}


gym.register("clbench_test/BreaksOnReset-v0", entry_point=_BreaksOnReset, disable_env_checker=True)


@pytest.mark.parametrize("index", [0, 2, 3])
@pytest.mark.parametrize("env_id", ["clbench_test/Faulty-v0", "clbench_test/BreaksOnReset-v0"], ids=["step", "reset"])
def test_error_in_the_fast_path_names_its_sub_env(env_id, index):
    """Once the wrappers' checks are done every sub-env steps (and, SAME_STEP, resets) in one loop over
    bound methods: an exception in a step or a reset there still names the sub-env that raised it."""
    vec = BatchedVectorEnv(env_id, 4, workers=1, autoreset_mode=AutoresetMode.SAME_STEP)
    vec.reset(seed=0)
    for _ in range(3):
        vec.step(("x",) * 4)
    assert vec._local._ready  # the wrappers' checks are done: the fast path
    actions = ["x"] * 4
    actions[index] = "boom"
    with pytest.raises(ValueError, match=rf"sub-env {index}: ValueError: the sub-env broke") as err:
        vec.step(tuple(actions))
    assert err.value.env_index == index and vec.closed


class _Scripted(gym.Env):
    """Each action names its step's outcome: "<reward> <terminated> <truncated>" (a reward of "-0",
    "nan", "int:N" or "f32:X"; an end flag "np" is numpy's True, "1" an int, "-" False), "boom"
    raises in step(), "bad-reset" ends the instance and makes the next reset raise."""

    observation_space = gym.spaces.Text(10)
    action_space = gym.spaces.Text(20)
    bad = False

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.bad:
            raise RuntimeError("the reset broke")
        return "ready", {"k": 0}

    def step(self, action):
        if action == "boom":
            raise ValueError("the step broke")
        if action == "bad-reset":
            self.bad = True
            return "end", 0.0, True, False, {"k": 1}
        reward, te, tr = action.split()
        value = (int(reward[4:]) if reward.startswith("int:") else np.float32(reward[4:])
                 if reward.startswith("f32:") else float(reward))
        flag = {"np": np.True_, "1": 1, "-": False}
        return "ok", value, flag[te], flag[tr], {"k": 2}


gym.register("clbench_test/Scripted-v0", entry_point=_Scripted, disable_env_checker=True)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.name)
def test_reward_and_end_arrays_are_exact_and_fresh(mode):
    """The rewards/terminations/truncations arrays (copies of arrays cached by the columns' exact
    bytes) equal SyncVectorEnv's bit for bit (-0.0, NaN, ints, float32, numpy and int end flags),
    also when a column repeats, and every step's arrays are fresh: changing one changes no later step's."""
    steps = [("0 - -", "-0 - -", "nan - -"), ("0 - -", "-0 - -", "nan - -"), ("0 - -", "0 - -", "0 - -"),
             ("int:3 np -", "f32:0.1 - 1", "0.5 1 np"), ("0 - -", "0 - -", "0 - -"),
             ("int:3 np -", "f32:0.1 - 1", "0.5 1 np"), ("-0 - -", "0 - -", "0 - -"), ("-0 - -", "0 - -", "nan - -")]
    vec = BatchedVectorEnv("clbench_test/Scripted-v0", 3, workers=1, autoreset_mode=mode)
    ref = gym.make_vec("clbench_test/Scripted-v0", 3, vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": mode})
    try:
        vec.reset(seed=0)
        ref.reset(seed=0)
        for t, actions in enumerate(steps * 2):
            got, want = vec.step(actions), ref.step(actions)
            assert _same(got, want), t
            for x, y in zip(got[1:4], want[1:4]):
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), t  # -0.0 and NaN's bits too
                x[...] = 7  # the caller's to change: a later step with the same columns must not see it
    finally:
        vec.close()
        ref.close()


def test_same_step_reports_the_first_failure_in_sync_order():
    """SAME_STEP steps every sub-env, then resets those that ended: when a later sub-env's step
    fails, the ended sub-envs before it are reset first, as SyncVectorEnv (step, reset, step, ...)
    has them, so a failing reset of sub-env 1 is the error reported, not the step of sub-env 3."""
    kw = dict(autoreset_mode=AutoresetMode.SAME_STEP)
    actions = ("0 - -", "bad-reset", "0 - -", "boom")
    ref = gym.make_vec("clbench_test/Scripted-v0", 4, vectorization_mode="sync", vector_kwargs=kw)
    ref.reset(seed=0)
    with pytest.raises(RuntimeError, match="the reset broke"):
        ref.step(actions)
    ref.close()
    vec = BatchedVectorEnv("clbench_test/Scripted-v0", 4, workers=1, **kw)
    vec.reset(seed=0)
    with pytest.raises(RuntimeError, match=r"sub-env 1: RuntimeError: the reset broke") as err:
        vec.step(actions)
    assert err.value.env_index == 1 and vec.closed
    vec = BatchedVectorEnv("clbench_test/Scripted-v0", 4, workers=1, **kw)  # no reset fails: the step's error
    vec.reset(seed=0)
    with pytest.raises(ValueError, match=r"sub-env 3: ValueError: the step broke"):
        vec.step(("0 - -", "0 np -", "0 - -", "boom"))


def test_step_arrays_are_fresh_and_columns_without_a_key_are_converted_each_time():
    """Reward and end arrays are fresh copies at every step (a caller may write into them); columns seen
    before come from the copies kept under their key, and columns that have none (rewards numpy parses
    from text, an env's own array of flags) are converted each time and never kept."""
    vec = gym.make_vec("clbench/MemoryProbe-v2", 2, vectorization_mode="vector_entry_point", workers=1)
    try:
        vec.reset(seed=0)
        shard = vec.unwrapped._local
        columns = [(("a", "b"), (0.5, 1.0), (False, True), None, ({}, {}), None, True),
                   (("a", "b"), ("0.5", "1.0"), (False, True), None, ({}, {}), None, True),
                   (("a", "b"), (0.5, 1.0), np.array([False, True]), None, ({}, {}), None, True)]
        for step_columns in columns:
            shard.step = lambda actions, c=step_columns: c
            kept = len(vec.unwrapped._made)
            first, second = vec.step(("x", "y")), vec.step(("x", "y"))
            for a, b in zip(first[1:3], second[1:3]):
                assert a is not b and np.array_equal(a, b)
            assert first[1].tolist() == [0.5, 1.0] and first[2].tolist() == [False, True]
            assert first[3].tolist() == [False, False] and first[1].dtype == np.float64
            first[1][0] = 9.0  # a caller's write reaches no later step
            assert vec.step(("x", "y"))[1].tolist() == [0.5, 1.0]
            assert len(vec.unwrapped._made) == (kept if step_columns is not columns[0] else kept + 1)
    finally:
        vec.close()


def _end_actions(env_id: str, t: int, rng) -> tuple:
    """Actions that end instances at different steps: an answer ends one at once, three invalid
    replies (garbage) too."""
    answer = "ANSWER Q1: 0" if env_id.startswith("clbench/MemoryProbe") else "ANSWER: 0"
    return tuple(answer if (i + t) % 3 == 0 else _garbage(rng) for i in range(BATCH_N))


@pytest.mark.parametrize("workers", [WORKERS, 1], ids=["3-processes", "parent-only"])
@pytest.mark.parametrize("env_id", ["clbench/DBExplore-v3", "clbench/MemoryProbe-v2"])
def test_disabled_autoreset_matches_sync_with_masked_resets(env_id, workers):
    """DISABLED: no sub-env resets by itself (a step before the reset is refused, and changes nothing);
    the caller resets those that ended with a reset_mask (and a seed), and step by step the vector
    gives what SyncVectorEnv gives, through many instance ends."""
    mode = AutoresetMode.DISABLED
    vec = gym.make_vec(env_id, BATCH_N, vectorization_mode="vector_entry_point", cycle=True, workers=workers,
                       autoreset_mode=mode)
    ref = gym.make_vec(env_id, BATCH_N, vectorization_mode="sync", cycle=True, vector_kwargs={"autoreset_mode": mode})
    try:
        assert vec.metadata["autoreset_mode"] == mode and vec.unwrapped.workers == workers
        assert _same(vec.reset(seed=3), ref.reset(seed=3))
        rng, ends, mixed = np.random.default_rng(0), 0, 0
        for t in range(STEPS):
            action = _end_actions(env_id, t, rng)
            got, want = vec.step(action), ref.step(action)
            for name, x, y in zip(("obs", "reward", "terminated", "truncated", "info"), got, want):
                assert _same(x, y), f"step {t}: {name} differs from SyncVectorEnv"
            assert "final_obs" not in got[4]
            done = got[2] | got[3]
            ends += int(done.sum())
            mixed += bool(done.any() and not done.all())
            if done.any():  # only the ended sub-envs reset; the others carry on
                with pytest.raises(AssertionError, match="reset_mask"):
                    vec.step(action)
                assert _same(vec.reset(seed=100 + t, options={"reset_mask": done}),
                             ref.reset(seed=100 + t, options={"reset_mask": done})), t
        assert ends >= 2 * BATCH_N and mixed >= 3, (ends, mixed)
    finally:
        ref.close()
        _close_within(vec)


@pytest.mark.parametrize(("workers", "in_parent"), [(1, True), (WORKERS, True), (1, False), (WORKERS, False)],
                         ids=["parent-only", "parent-and-2-workers", "1-worker", "3-workers"])
def test_disabled_step_of_an_ended_sub_env_without_reset_raises(workers, in_parent):
    """DISABLED: stepping a sub-env whose instance ended, not reset, raises SyncVectorEnv's AssertionError
    naming the sub-envs and the reset_mask; nothing steps, so after the masked reset the vector goes on
    as SyncVectorEnv does."""
    mode = AutoresetMode.DISABLED
    vec = BatchedVectorEnv("clbench_test/Scripted-v0", BATCH_N, workers=workers, in_parent=in_parent,
                           autoreset_mode=mode)
    ref = gym.make_vec("clbench_test/Scripted-v0", BATCH_N, vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": mode})
    try:
        quiet = ("1 - -",) * BATCH_N
        assert _same(vec.reset(seed=0), ref.reset(seed=0))
        ending = ("1 - -", "2 1 -", "3 - -", "4 - np", "5 - -")  # sub-envs 1 (terminated) and 3 (truncated)
        assert _same(vec.step(ending), ref.step(ending))
        for _ in range(2):  # the refusal changes nothing: it comes again
            with pytest.raises(AssertionError, match=r"sub-envs 1, 3 ended .*DISABLED.*reset_mask") as err:
                vec.step(quiet)
            assert err.value.env_index == 1
        with pytest.raises(AssertionError):
            ref.step(quiet)  # (after stepping sub-env 0 again, which _Scripted's steps do not see)
        mask = np.array([False, True, False, False, False])
        assert _same(vec.reset(seed=7, options={"reset_mask": mask}), ref.reset(seed=7, options={"reset_mask": mask}))
        with pytest.raises(AssertionError, match=r"sub-env 3 ended .*reset_mask") as err:
            vec.step(quiet)
        assert err.value.env_index == 3
        mask = np.array([False, False, False, True, False])
        assert _same(vec.reset(seed=8, options={"reset_mask": mask}), ref.reset(seed=8, options={"reset_mask": mask}))
        for actions in (quiet, ("0 np -",) * BATCH_N):
            assert _same(vec.step(actions), ref.step(actions))
        with pytest.raises(AssertionError, match=r"sub-envs 0, 1, 2, 3, 4 ended"):
            vec.step(quiet)
        assert _same(vec.reset(seed=9), ref.reset(seed=9))  # a full reset resets every sub-env
        assert _same(vec.step(quiet), ref.step(quiet))
    finally:
        ref.close()
        _close_within(vec)
