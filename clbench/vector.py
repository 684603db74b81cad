"""A vector env that steps several sub-envs per process, in the parent or in worker processes.

    gym.make_vec("clbench/SpectrumMonitor-v6", 8, vectorization_mode="vector_entry_point", cycle=True)

Why: a clbench step is cheap text work (well under a millisecond for most envs; a warm DBExplore
instance ~30 us), so gymnasium's AsyncVectorEnv, with one process and one pipe round trip per
sub-env per step, spends more time in IPC and process switching than in the envs, and
SyncVectorEnv's per-step stacking of infos costs more than a cheap instance. `BatchedVectorEnv`
steps its sub-envs in `workers` processes (the parent is one of them), each holding about
num_envs / workers sub-envs, and exchanges one message per worker per step. The default
(`default_workers`) follows the env's declared cost per step (`STEP_SECONDS`, or the env class's
`vector_step_seconds`): cheap steps keep every sub-env in the parent, where a second process would
cost a wake-up and a round trip per step, more than it gains (DBExplore); dearer steps (SpectrumMonitor,
MemoryProbe) get as many processes as there are free CPUs while each still has about 0.4 ms of work
per vector step.

Per step it does little more than the sub-envs' own work: the sub-envs are called directly once
gym.make's wrappers only forward (OrderEnforcing after a reset, PassiveEnvChecker after its
one-time checks), by generated straight-line code (one statement per sub-env; `_stepper_source`); in
SAME_STEP every sub-env steps first and then those whose instance ended reset (eight steps, then
the resets, keep each method's code and data hot, where alternating them evicts them; sub-envs
share nothing, so the order changes no result, and an error raised is the one SyncVectorEnv's order
raises first), which also tells whether every observation is a str (then the batch is their tuple);
the reward and end arrays are copies of arrays made when the same columns last came (one dict lookup
for the three; NEXT_STEP's step of resets alone, no reward and no end, takes the zero arrays without a
key), and the infos are stacked only when read (`LazyInfo`; `lazy_info=False` stacks them
in step()); a worker process pickles its infos apart from its columns, so the parent unpickles them
only when the info is read.

The API is gymnasium's `VectorEnv` as `SyncVectorEnv` implements it: batched spaces, autoreset
modes NEXT_STEP (default), SAME_STEP and DISABLED, infos stacked as `_add_info` stacks them, `reset(seed=,
options={"reset_mask": ...})`, `call`/`get_attr`/`set_attr`. The same seeds give the same results as
`SyncVectorEnv`. In DISABLED no sub-env resets by itself: reset those whose instance ended with
`reset(options={"reset_mask": ...})`; a step before that raises AssertionError (SyncVectorEnv's assert)
naming them, before any sub-env steps, and the vector stays usable. A lazy info is built from the
info dicts the sub-envs returned, so, as gymnasium asks of every env (its env checker warns
otherwise), a sub-env must not modify an info after returning it; infos that cannot be stacked (one
key an int in one sub-env, None in another) raise where the info is first read. An exception in a
sub-env is re-raised in the parent (same type when possible) naming the sub-env's index; the vector
is then closed. `close()` never hangs: workers get a grace period, then SIGTERM, then SIGKILL.
Workers die with the parent (they watch its pid, and a closed pipe ends them) and ignore SIGINT, so
Ctrl-C is the parent's to handle.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import struct
import threading
import time
import traceback
from copy import deepcopy
from multiprocessing.reduction import ForkingPickler
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

#: seconds close() waits for workers to finish before terminating them
CLOSE_GRACE = 5.0


def _watch_parent(parent: int) -> None:
    """End this worker when the parent process is gone (SIGKILL leaves no one to close it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch():
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, name="clbench-vector-parent-watch", daemon=True).start()


class _SubEnvError(Exception):
    def __init__(self, index: int | None, exc: BaseException):
        super().__init__(index, exc)
        self.index, self.exc = index, exc


class _NotReset(Exception):
    """A DISABLED step of sub-envs (global indices) whose instance ended and that were not reset."""

    def __init__(self, indices: list[int]):
        super().__init__(indices)
        self.indices = indices


def _stepper_source(n: int, mode: AutoresetMode) -> str:
    """Source of `make(shard, s0.., z0..)`, which returns (step, reset_all) for n sub-envs whose bound step
    and reset methods are s0.. and z0..: straight-line code, one statement per sub-env into local
    variables, where a loop stores its results in lists and reads them back (on DBExplore 1.4k of the
    vector's 4.8k instructions per instance above eight bare sub-envs). `step` is `_Shard.step`'s work
    (in SAME_STEP every sub-env steps, then those whose instance ended reset; in NEXT_STEP after every
    instance ended, the resets alone; in DISABLED nothing resets, and a step while an ended sub-env
    was not reset raises `_NotReset` before any sub-env steps); `reset_all` resets every sub-env.
    Each returns its columns and whether every observation is a str (type checks on the locals cost
    about half of a check over the column). `i` names the sub-env being called, for the error."""
    ks, same_step = range(n), mode is AutoresetMode.SAME_STEP

    def cols(fmt: str) -> str:
        return "(" + "".join(fmt.format(k) + ", " for k in ks) + ")"

    def guarded(body: list[str], on_error: str) -> list[str]:
        return ["    try:", *body, "    except Exception as exc:", f"        {on_error}"]

    text = " and ".join(f"type(o{k}) is str" for k in ks)
    lines = [f"def make(shard, {''.join(f's{k}, ' for k in ks)}{''.join(f'z{k}, ' for k in ks)}):",
             " def step(a):"]
    if mode is AutoresetMode.DISABLED:  # as SyncVectorEnv, no autoreset: the user resets with reset_mask
        lines += ["    if shard.autoreset is not None:", "        shard._not_reset()"]
    elif not same_step:  # the sub-envs whose instance ended in the last step reset instead
        lines += ["    ends = shard.autoreset", "    if ends is not None:",
                  f"        if {' and '.join(f'ends[{k}]' for k in ks)}:",
                  "            shard.autoreset = None", "            return reset_all()",
                  "        return shard._restart(a)"]
    lines += guarded([f"        i = {k}\n        o{k}, r{k}, te{k}, tr{k}, i{k} = s{k}(a[{k}])" for k in ks],
                     "shard._failed(i, locals(), exc)")
    lines += [f"    term = {' or '.join(f'te{k}' for k in ks)}", f"    trunc = {' or '.join(f'tr{k}' for k in ks)}",
              "    if not (term or trunc):",
              f"        return {cols('o{}')}, {cols('r{}')}, None, None, {cols('i{}')}, None, {text}"]
    if same_step:
        lines += [f"    {' = '.join(f'f{k}' for k in ks)} = None"]
        lines += guarded([f"        i = {k}\n        if te{k} or tr{k}:\n            f{k} = o{k}, i{k}\n"
                          f"            o{k}, i{k} = z{k}()" for k in ks],
                         "raise _SubEnvError(shard.first + i, exc) from exc")
        finals = cols("f{}")
    else:  # truthy where the instance ended (what _restart, _not_reset and reset read of it)
        lines += [f"    shard.autoreset = {cols('te{0} or tr{0}')}"]
        finals = "None"
    lines += [f"    return {cols('o{}')}, {cols('r{}')}, {cols('te{}')} if term else None, "
              f"{cols('tr{}')} if trunc else None, {cols('i{}')}, {finals}, {text}",
              " def reset_all():"]
    lines += guarded([f"        i = {k}\n        o{k}, i{k} = z{k}()" for k in ks],
                     "raise _SubEnvError(shard.first + i, exc) from exc")
    lines += [f"    return {cols('o{}')}, None, None, None, {cols('i{}')}, None, {text}", " return step, reset_all"]
    return "\n".join(lines)


_MAKERS: dict[tuple[int, AutoresetMode], Any] = {}


def _stepper(n: int, mode: AutoresetMode):
    """`make` of `_stepper_source(n, mode)`, compiled once per process."""
    make = _MAKERS.get((n, mode))
    if make is None:
        scope = {"_SubEnvError": _SubEnvError}
        exec(compile(_stepper_source(n, mode), f"<clbench.vector stepper of {n}>", "exec"), scope)
        make = _MAKERS[(n, mode)] = scope["make"]
    return make


class _Shard:
    """Some consecutive sub-envs (global indices first, first + 1, ...), stepped in one process the way
    SyncVectorEnv steps its sub-envs."""

    def __init__(self, env_id: str, env_kwargs: dict, first: int, count: int, mode: AutoresetMode):
        from clbench.registry import register_all

        register_all()
        self.first, self.mode, self.envs, self.count = first, mode, [], count
        self.same_step = mode is AutoresetMode.SAME_STEP
        # NEXT_STEP: per sub-env, whether it resets in the next step; DISABLED: whether it ended, not reset yet
        self.autoreset: list | None = None
        for _ in range(count):
            self.envs.append(self._run(len(self.envs), gym.make, env_id, **env_kwargs))
        self.calls = list(self.envs)  # what step() calls: each env, or the env inside its forwarding wrappers
        self._direct = [False] * count
        self._ready = False  # every sub-env called directly
        self._bind()

    def _bind(self) -> None:
        self._steps = [env.step for env in self.calls]  # bound methods, looked up once
        self._resets = [env.reset for env in self.calls]
        self._step, self._reset_all = _stepper(self.count, self.mode)(self, *self._steps, *self._resets)

    def _run(self, index: int, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise _SubEnvError(self.first + index, exc) from exc

    def describe(self):
        env = self.envs[0]
        return env.observation_space, env.action_space, dict(env.metadata), env.render_mode

    def step(self, actions):
        """Columns (observations, rewards, terminations, truncations, infos, finals) of these sub-envs, as
        tuples, and whether every observation is a str; None stands for a column of zeros (rewards), of
        False (terminations or truncations, when no instance ended that way) or of None (finals).
        finals[i] is (final_obs, final_info) of an instance that ended in a SAME_STEP step. In SAME_STEP
        every sub-env steps first and then those whose instance ended reset (sub-envs share nothing, so
        the order changes no result; eight steps, then the resets, keep each method's code and data hot
        in the caches, which alternating them does not: ~0.8 us per instance on DBExplore).
        This method runs until every sub-env is called directly (`_settle`); then the instance's `step`
        is the generated function itself (`_stepper_source`)."""
        out = self._step(actions)
        self._settle()
        return out

    def _failed(self, i: int, loc: dict, exc: Exception):
        """Sub-env i's step raised `exc`: in SAME_STEP the ended sub-envs before it reset first, as
        SyncVectorEnv (step, reset, step, ...) had them; then the error, naming sub-env i."""
        if self.same_step:
            self._reset_ended([loc[f"te{k}"] or loc[f"tr{k}"] for k in range(i)],
                              [loc[f"o{k}"] for k in range(i)], [loc[f"i{k}"] for k in range(i)])
        raise _SubEnvError(self.first + i, exc) from exc

    def _not_reset(self):
        """DISABLED: a step while some sub-envs' instances ended and were not reset (nothing stepped)."""
        raise _NotReset([self.first + i for i, ended in enumerate(self.autoreset) if ended])

    def _reset_ended(self, ends: list[bool], obs: list, infos: list) -> None:
        """Reset the sub-envs whose instance ended (a failed SAME_STEP step's earlier sub-envs)."""
        for i, ended in enumerate(ends):
            if ended:
                try:
                    obs[i], infos[i] = self._resets[i]()
                except Exception as exc:
                    raise _SubEnvError(self.first + i, exc) from exc

    def _restart(self, actions):
        """NEXT_STEP after some instances ended: those sub-envs reset (reward 0, not ended), the
        others step, as SyncVectorEnv does them; when all ended, resets only."""
        autoreset, self.autoreset = self.autoreset, None
        if all(autoreset):
            return self._reset_all()
        n, resets = self.count, self._resets
        obs, infos = [None] * n, [None] * n
        rewards, terms, truncs, ends = [0.0] * n, [False] * n, [False] * n, [False] * n
        i = 0
        try:
            for step in self._steps:
                if autoreset[i]:
                    obs[i], infos[i] = resets[i]()
                else:
                    obs[i], rewards[i], te, tr, infos[i] = step(actions[i])
                    terms[i], truncs[i], ends[i] = te, tr, bool(te or tr)
                i += 1
        except Exception as exc:
            raise _SubEnvError(self.first + i, exc) from exc
        if True in ends:
            self.autoreset = ends
        return tuple(obs), tuple(rewards), tuple(terms), tuple(truncs), tuple(infos), None, \
            _STR.issuperset(map(type, obs))

    def _settle(self) -> None:
        """Call an env directly once every wrapper around it only forwards: gym.make's OrderEnforcing
        after a reset, PassiveEnvChecker after its one-time checks (first reset, first two steps)."""
        from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker

        changed = False
        for i, env in enumerate(self.envs):
            layer, forwarding = env, True
            while isinstance(layer, gym.Wrapper):
                if type(layer) is OrderEnforcing:
                    forwarding &= layer.has_reset
                elif type(layer) is PassiveEnvChecker:
                    forwarding &= layer.checked_reset and layer.checked_step and layer.checked_data_reuse
                else:
                    forwarding = False
                layer = layer.env
            if forwarding and not self._direct[i]:
                self.calls[i], self._direct[i] = layer, True
                changed = True
        if changed:
            self._bind()
        self._ready = all(self._direct)
        if self._ready:
            self.step = self._step  # no more settling: the generated function itself

    def reset(self, seeds, options, mask):
        out = []
        if self.autoreset is not None:  # a reset sub-env does not reset again in the next step
            self.autoreset = [pending and not (mask is None or mask[i]) for i, pending in enumerate(self.autoreset)]
            if not any(self.autoreset):
                self.autoreset = None
        for i, env in enumerate(self.envs):
            if mask is None or mask[i]:
                out.append(self._run(i, env.reset, seed=seeds[i], options=deepcopy(options)))
            else:
                out.append(None)
        return out

    def call(self, name, args, kwargs):
        res = []
        for i, env in enumerate(self.envs):
            attr = self._run(i, env.get_wrapper_attr, name)
            res.append(self._run(i, attr, *args, **kwargs) if callable(attr) else attr)
        return res

    def set_attr(self, name, values):
        for i, env in enumerate(self.envs):
            self._run(i, env.set_wrapper_attr, name, values[i])

    def handle(self, cmd: str, args: tuple) -> tuple[str, Any]:
        try:
            return "ok", getattr(self, cmd)(*args)
        except _SubEnvError as err:
            return "error", (err.index, _portable(err.exc))

    def close(self) -> None:
        for env in self.envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing the rest matters more
                pass


def _worker(env_id: str, env_kwargs: dict, first: int, count: int, mode: AutoresetMode, pipe, parent_pipe,
            parent: int) -> None:
    parent_pipe.close()  # else this process keeps its own pipe open and never sees the parent go
    _watch_parent(parent)
    try:
        shard = _Shard(env_id, env_kwargs, first, count, mode)
    except _SubEnvError as err:
        pipe.send(("error", (err.index, _portable(err.exc))))
        return
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        pipe.send(("error", (None, _portable(exc))))
        return
    pipe.send(("ok", shard.describe()))
    try:
        while True:
            try:
                cmd, args = pipe.recv()
            except (EOFError, OSError):  # the parent is gone
                return
            if cmd == "close":
                break
            answer = shard.handle(cmd, args)
            if cmd == "step" and answer[0] == "ok":  # infos pickled apart: the parent unpickles them when read
                obs, rewards, terms, truncs, infos, finals, text = answer[1]
                answer = "ok", (obs, rewards, terms, truncs, bytes(ForkingPickler.dumps((infos, finals))), None, text)
            pipe.send(answer)
            if answer[0] == "error":
                return
    finally:
        shard.close()
    try:
        pipe.send(("ok", None))
    except (OSError, ValueError):
        pass


def _portable(exc: BaseException) -> tuple[type, str, str]:
    """The exception's type (if it pickles), message and traceback text."""
    kind = type(exc)
    try:
        pickle.loads(pickle.dumps(kind))
    except Exception:  # noqa: BLE001 - a local class: fall back to RuntimeError
        kind = RuntimeError
    return kind, f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc))


_STR = {str}
#: `_join`'s finals: the infos are per-shard parts, joined when read (`_unshard`)
_SHARDS = object()


class _Pending:
    """The key of an unbuilt LazyInfo's placeholder entry (no string: no serializer takes it as a field)."""

    def __repr__(self) -> str:
        return "<info not built yet>"


_PENDING = _Pending()


class LazyInfo(dict):
    """A step's stacked infos, built on first use: a training loop that reads no info pays nothing
    for stacking. Any use (indexing, `in`, iteration, len, ==, copy, pickle, dict(...), {**...}) first
    builds the whole dict, which is then the plain dict `_add_info` would have given; a copy or a
    pickle is a plain dict. Until its first use its storage holds one placeholder entry under a
    key that is no string: C code that reads a dict's size before its methods (json's C encoder)
    then goes through `items()` and gets the stacked infos, and code that reads the storage alone
    fails loudly on the key instead of seeing an empty info."""

    __slots__ = ()

    @classmethod
    def deferred(cls, build, arg) -> "LazyInfo":
        """The info `build(arg)` gives, built on first use."""
        return cls({_PENDING: (build, arg)})

    def _ready(self) -> "LazyInfo":
        pending = dict.get(self, _PENDING)
        if pending is not None:
            stacked = pending[0](pending[1])  # an error leaves the placeholder: the next use raises it again
            dict.clear(self)
            dict.update(self, stacked)
        return self

    def __eq__(self, other):
        if isinstance(other, LazyInfo):
            other._ready()
        return dict.__eq__(self._ready(), other)

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None

    def __reduce_ex__(self, protocol):
        return dict, (dict(dict.items(self._ready())),)

    def __copy__(self):
        return dict(dict.items(self._ready()))


def _built_first(name: str):
    base = getattr(dict, name)

    def method(self, *args, **kwargs):
        return base(self._ready(), *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = base.__doc__
    return method


for _name in ("__getitem__", "__contains__", "__iter__", "__len__", "__repr__", "__or__", "__ror__", "__ior__",
              "__reversed__", "__setitem__", "__delitem__", "__sizeof__", "keys", "values", "items", "get", "copy",
              "pop", "popitem", "setdefault", "update", "clear"):
    setattr(LazyInfo, _name, _built_first(_name))


def _keep(made: dict, key, value):
    """`value`, kept in `made` under `key`; `made` holds at most 256."""
    if len(made) >= 256:
        made.clear()
    made[key] = value
    return value


def _stack_later(arg: tuple) -> dict[str, Any]:
    """A lazy info's builder: (vector, infos, finals) -> the stacked infos (no bound method kept: no cycle)."""
    vec, infos, finals = arg
    return vec._stack_step((infos, finals))


#: typical CPU seconds of one sub-env step (its share of instance resets included) with the benchmark's
#: fixed replies, warm, by task (benchmarks/bench_vector.py; DBExplore's first answer to each question in
#: a process runs its SQL, ~2 ms, later ones are cached). An env class may declare its own as
#: `vector_step_seconds`, which wins. Only the order of magnitude matters (`default_workers`).
STEP_SECONDS = {
    "dbexplore": 20e-6,
    "poker": 80e-6,
    "spectrummonitor": 120e-6,
    "salesforecast": 350e-6,
    "memoryprobe": 350e-6,
    "cohortstudies": 3e-3,
    "coderepair": 50e-3,  # a sandboxed command
}
#: CPU seconds of sub-env work per vector step that make one worker process pay: each worker costs
#: every vector step a pipe round trip, pickling and a wake-up (~0.1-0.25 ms on a shared machine),
#: so a process is added only for about twice that much work (on 2 quiet CPUs two processes gave
#: SpectrumMonitor, 8 x 0.12 ms a vector step, 1.45x one env; DBExplore, 8 x 0.03 ms, 0.88x)
WORKER_MIN_SECONDS = 0.4e-3


def step_seconds(env_id: str) -> float | None:
    """The declared cost of one step of `env_id` (`vector_step_seconds` of its class, else
    STEP_SECONDS by task); None when nothing is declared."""
    try:
        spec = gym.spec(env_id)
        cls = spec.entry_point
        if isinstance(cls, str):
            from clbench.agent import load_object

            cls = load_object(cls)
    except Exception:  # noqa: BLE001 - an id or entry point that cannot be resolved: nothing declared
        return None
    declared = getattr(cls, "vector_step_seconds", None)
    if declared is None:
        declared = STEP_SECONDS.get(getattr(cls, "task", None))
    return None if declared is None else float(declared)


def machine_cpus() -> int:
    """CPUs this process may run on, busy or not."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def available_cpus() -> int:
    """CPUs this process may run on, less those the other processes keep busy (the 1-minute load
    average, this process included, rounded: a load of 1.2 on 2 CPUs leaves most of one free), at
    least 1: a worker process only gains when a CPU is free."""
    cpus = machine_cpus()
    try:
        busy = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform: count every CPU
        busy = 0.0
    return max(1, min(cpus, cpus + 1 - round(busy)))


def default_workers(num_envs: int, step_seconds: float | None = None, cpus: int | None = None) -> int:
    """Processes for `num_envs` sub-envs whose step costs `step_seconds` of CPU, when `workers` is not
    given: as many as there are free CPUs (`available_cpus`) and sub-envs while each process still has
    at least WORKER_MIN_SECONDS of sub-env work per vector step, else one (the parent). Cheap steps
    (DBExplore warm ~30 us: 8 x 0.03 = 0.24 ms a vector step) stay in the parent, where a vector of 8
    does one env's work per instance; dearer ones (SpectrumMonitor ~0.12 ms, MemoryProbe ~0.35 ms)
    get worker processes when CPUs are free for them. An undeclared cost counts as cheap. The choice
    changes speed only, never results (benchmarks/bench_vector.py measures both)."""
    cpus = available_cpus() if cpus is None else cpus
    if not step_seconds or cpus < 2:
        return 1
    return max(1, min(cpus, num_envs, int(num_envs * step_seconds / WORKER_MIN_SECONDS)))


class BatchedVectorEnv(VectorEnv):
    """`num_envs` sub-envs of `env_id` spread over `workers` processes; env kwargs go to `gym.make`.

    With `in_parent` (default) the parent is one of the `workers`: it steps the first shard itself
    while the worker processes step theirs, instead of idling until they answer."""

    def __init__(self, env_id: str, num_envs: int, workers: int | None = None,
                 autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP, copy: bool = True,
                 in_parent: bool = True, context: str | None = None, lazy_info: bool = True, **env_kwargs: Any):
        super().__init__()
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.env_id, self.num_envs, self.copy, self.lazy_info = env_id, num_envs, copy, lazy_info
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.step_seconds = step_seconds(env_id)
        self.workers = max(1, min(num_envs, workers or default_workers(num_envs, self.step_seconds)))
        counts = [num_envs // self.workers + (w < num_envs % self.workers) for w in range(self.workers)]
        self._slices = [slice(sum(counts[:w]), sum(counts[:w + 1])) for w in range(self.workers)]
        self._closed, self._procs, self._pipes, self._local = False, [], [], None
        self._offset = int(in_parent)  # shard 0 is stepped by the parent itself, which would idle otherwise
        ctx = mp.get_context(context)
        try:
            for sl in self._slices[self._offset:]:
                parent_pipe, child_pipe = ctx.Pipe()
                proc = ctx.Process(target=_worker, name=f"clbench-vector-{sl.start}-{sl.stop - 1}", daemon=True,
                                   args=(env_id, env_kwargs, sl.start, sl.stop - sl.start, self.autoreset_mode,
                                         child_pipe, parent_pipe, os.getpid()))
                proc.start()
                child_pipe.close()
                self._procs.append(proc)
                self._pipes.append(parent_pipe)
            first = []
            if in_parent:
                try:
                    self._local = _Shard(env_id, env_kwargs, 0, counts[0], self.autoreset_mode)
                    first = [("ok", self._local.describe())]
                except _SubEnvError as err:
                    first = [("error", (err.index, _portable(err.exc)))]
            obs_space, act_space, metadata, self.render_mode = self._gather(first)[0]
        except BaseException:
            self.close()
            raise
        self.metadata = {**metadata, "autoreset_mode": self.autoreset_mode}
        self.single_observation_space, self.single_action_space = obs_space, act_space
        self.observation_space = batch_space(obs_space, num_envs)
        self.action_space = batch_space(act_space, num_envs)
        self._env_obs: list[Any] = [None] * num_envs
        self._observations = create_empty_array(obs_space, n=num_envs, fn=np.zeros)
        # the copy methods of arrays made when the same columns came before, by (the rewards' bytes, the end
        # flags); None is a column of zeros or False (`_copies`)
        self._zeros = np.zeros(num_envs, dtype=np.float64).copy
        self._false = np.zeros(num_envs, dtype=np.bool_).copy
        self._made: dict[tuple, tuple] = {}
        self._quiet = self._copies(None, None, None)  # no reward, no instance ended
        self._pack = struct.Struct(f"{num_envs}d").pack
        # spaces whose batches gymnasium keeps as plain tuples (Text and its subclasses): concatenate()
        # gives tuple(items) and iterate() gives iter(actions), which step() then does without them
        self._text_obs = concatenate.dispatch(type(obs_space)) is concatenate.dispatch(gym.spaces.Text)
        self._text_actions = type(self.action_space) is gym.spaces.Tuple and type(act_space) not in iterate.registry
        self._every = list(range(num_envs))  # the indices of a key every sub-env reported
        # per kind (zeros, False, None), each shard's column of it: what `_join` puts for a shard's None
        self._fills = [[(fill,) * (sl.stop - sl.start) for sl in self._slices] for fill in (0.0, False, None)]
        # DISABLED with worker processes: the sub-envs whose instance ended and were not reset, checked here
        # before any shard steps (a parent-only vector's shard checks its own: `_NotReset`)
        self._disabled, self._unreset = self.autoreset_mode is AutoresetMode.DISABLED, []

    # --- messaging: one message to each worker, the parent's own shard meanwhile, then one answer from each
    def _send(self, cmd: str, per_shard: list[tuple]) -> list[Any]:
        if self._closed:
            raise RuntimeError(f"{self.env_id}: the vector env is closed")
        try:
            for pipe, args in zip(self._pipes, per_shard[self._offset:]):
                pipe.send((cmd, args))
        except (OSError, ValueError) as exc:
            self.close()
            raise RuntimeError(f"{self.env_id}: a vector worker is gone ({exc})") from exc
        return self._gather([self._local.handle(cmd, per_shard[0])] if self._local else [])

    def _gather(self, answers: list[tuple[str, Any]]) -> list[Any]:
        """The payloads of `answers` (the parent's shard) and of each worker's answer, in shard order;
        the first error is raised (after closing) naming its sub-env."""
        for w, pipe in enumerate(self._pipes):
            try:
                answers.append(pipe.recv())
            except (EOFError, OSError):
                sl = self._slices[w + self._offset]
                answers.append(("error", (None, (RuntimeError, f"the worker of sub-envs {sl.start}-{sl.stop - 1} "
                                                 f"died (exit code {self._procs[w].exitcode})", ""))))
        errors = [payload for status, payload in answers if status == "error"]
        if errors:
            self.close()
            index, (kind, message, tb) = errors[0]
            where = f"sub-env {index}" if index is not None else "a worker"
            text = f"{self.env_id} {where}: {message}" + (f"\n\nIn the worker:\n{tb}" if tb else "")
            try:
                exc = kind(text)
            except Exception:  # noqa: BLE001 - a type whose constructor wants other arguments
                exc = RuntimeError(text)
            exc.env_index = index
            raise exc
        return [payload for _, payload in answers]

    def _split(self, values: list[Any]) -> list[list[Any]]:
        return [values[sl] for sl in self._slices]

    # --- the VectorEnv API
    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        if seed is None:
            seed = [None] * self.num_envs
        elif isinstance(seed, int):
            seed = [seed + i for i in range(self.num_envs)]
        if len(seed) != self.num_envs:
            raise ValueError(f"If seeds are passed as a list the length must match num_envs={self.num_envs} "
                             f"but got length={len(seed)}.")
        options = dict(options) if options else None
        mask = options.pop("reset_mask", None) if options is not None else None
        if mask is not None:
            if not isinstance(mask, np.ndarray) or mask.shape != (self.num_envs,) or mask.dtype != np.bool_:
                raise TypeError(f"`options['reset_mask']` must be a numpy bool array of shape ({self.num_envs},)")
            if not mask.any():
                raise ValueError("`options['reset_mask']` must contain at least one True value")
        masks = self._split(list(mask)) if mask is not None else [None] * self.workers
        if self._unreset:
            self._unreset = [i for i in self._unreset if not (mask is None or mask[i])]
        answers = self._send("reset", [(s, options, m) for s, m in zip(self._split(seed), masks)])
        pairs, self._env_obs = [], list(self._env_obs)  # a step leaves a tuple
        for i, res in enumerate(r for answer in answers for r in answer):
            if res is not None:
                self._env_obs[i], info = res
                pairs.append((i, info))
        return self._batch(), self._stack(pairs)

    def step(self, actions):
        if self._text_actions and isinstance(actions, (tuple, list)):
            pass  # what iterate() gives for a Tuple of such spaces: its items
        else:
            actions = list(iterate(self.action_space, actions))
        if len(actions) != self.num_envs:
            raise ValueError(f"{self.env_id}: {len(actions)} actions for {self.num_envs} sub-envs")
        if self._pipes or self._closed:
            if self._disabled:
                obs, rewards, terms, truncs, infos, finals, text = self._step_disabled(actions)
            else:
                obs, rewards, terms, truncs, infos, finals, text = self._join(
                    self._send("step", [(a,) for a in self._split(actions)]))
        else:  # every sub-env in the parent: no messages to send or gather
            try:
                obs, rewards, terms, truncs, infos, finals, text = self._local.step(actions)
            except _SubEnvError as err:
                self._gather([("error", (err.index, _portable(err.exc)))])
            except _NotReset as err:
                raise self._not_reset(err.indices) from None
        if rewards is None and terms is None and truncs is None:  # NEXT_STEP's step of resets: no key to build
            copies = self._quiet
        else:
            try:
                key = (rewards if rewards is None else self._pack(*rewards), terms, truncs)
                copies = self._made[key]
            except KeyError:  # columns not seen before: kept for the next time they come
                copies = _keep(self._made, key, self._copies(rewards, terms, truncs))
            except (struct.error, TypeError, ValueError, OverflowError):  # no key: converted each time
                copies = self._copies(rewards, terms, truncs)
        info = LazyInfo({_PENDING: (_stack_later, (self, infos, finals))}) if self.lazy_info else \
            self._stack_step((infos, finals))
        self._env_obs = obs
        if text and self._text_obs:  # `_batch`'s first case, without its call (obs is a tuple)
            return obs, copies[0](), copies[1](), copies[2](), info
        return self._batch(), copies[0](), copies[1](), copies[2](), info

    def _step_disabled(self, actions) -> tuple:
        """DISABLED with worker processes: the step's columns, refused before any shard steps while a
        sub-env whose instance ended was not reset (the vector keeps which ones)."""
        if self._unreset and not self._closed:
            raise self._not_reset(self._unreset)
        columns = self._join(self._send("step", [(a,) for a in self._split(actions)]))
        terms, truncs = columns[2:4]
        if terms or truncs:  # None: a column of False
            no = (False,) * self.num_envs
            self._unreset = [i for i, te, tr in zip(self._every, terms or no, truncs or no) if te or tr]
        return columns

    def _not_reset(self, indices: list[int]) -> AssertionError:
        """The error of a DISABLED step while these sub-envs' instances ended and were not reset (the
        type SyncVectorEnv's assert raises); nothing was stepped, so the vector stays usable."""
        which = f"sub-env {indices[0]}" if len(indices) == 1 else f"sub-envs {', '.join(map(str, indices))}"
        exc = AssertionError(
            f"{self.env_id}: {which} ended (terminated or truncated) and autoreset_mode is DISABLED, so it is not "
            f"reset automatically: reset it before the next step, with reset(options={{'reset_mask': mask}}) where "
            f"mask is a numpy bool array of shape ({self.num_envs},), True at {indices}")
        exc.env_index = indices[0]
        return exc

    def _copies(self, rewards, terms, truncs) -> tuple:
        """The copy methods of arrays of these columns (None: zeros or False), kept by `step` under
        their key. step() returns fresh arrays, as SyncVectorEnv returns copies: copies of the arrays
        made the first time the same columns came (a copy costs less than a conversion; columns repeat
        from step to step), found by the rewards' exact bytes (a dict of floats would take -0.0 for
        0.0) and the end flags' values. Rewards the packing refuses (one numpy parses from text) and
        unhashable end flags (an env's own array) have no key and are converted each time."""
        return (self._zeros if rewards is None else np.array(rewards, dtype=np.float64).copy,
                *(self._false if c is None else np.array(c, dtype=np.bool_).copy for c in (terms, truncs)))

    def _join(self, answers: list[tuple]) -> tuple:
        """One step's columns from the shards' answers, in sub-env order (None: a column of zeros or
        False, as `_Shard.step` gives it), and whether every observation is a str. Infos and finals stay
        per shard (a worker's as the bytes it pickled them to, `_worker`) until the info is read
        (`_unshard`): a step whose info is not read never unpickles them."""
        obs, rewards, terms, truncs, infos, finals, text = zip(*answers)
        return (sum(obs, ()), self._column(rewards, 0), self._column(terms, 1), self._column(truncs, 1),
                tuple(zip(infos, finals)), _SHARDS, all(text))

    def _column(self, parts: tuple, kind: int) -> tuple | None:
        """A column of the shards' parts: a None part is that shard's zeros (kind 0) or False (1); None if all are."""
        nones = parts.count(None)
        if nones == len(parts):
            return None
        if nones:
            parts = [part if part is not None else fill for part, fill in zip(parts, self._fills[kind])]
        return sum(parts, ())

    def _unshard(self, parts: tuple) -> tuple[list, tuple | None]:
        """The infos and finals columns of `_join`'s per-shard (infos, finals) parts."""
        infos, finals, ended = [], [], False
        for (part, final), fill in zip(parts, self._fills[2]):
            if type(part) is bytes:
                part, final = pickle.loads(part)
            infos += part
            finals += fill if final is None else final
            ended = ended or final is not None
        return infos, (tuple(finals) if ended else None)

    def _stack_step(self, columns) -> dict[str, Any]:
        infos, finals = columns
        if finals is _SHARDS:
            infos, finals = self._unshard(infos)
        if finals is None:
            return self._stack(list(enumerate(infos)))
        pairs = []  # SyncVectorEnv adds a sub-env's final_obs/final_info first, then its new info
        for i, (info, final) in enumerate(zip(infos, finals)):
            if final is not None:
                pairs.append((i, {"final_obs": final[0], "final_info": final[1]}))
            pairs.append((i, info))
        return self._stack(pairs)

    def _stack(self, pairs: list[tuple[int, dict]]) -> dict[str, Any]:
        """What `_add_info` gives for these (index, info) pairs in this order, built key by key instead
        of info by info (`_add_info` makes a fresh mask array per key per sub-env: a third of a cheap
        instance's cost); a column of one Python scalar type held by every sub-env is one numpy call.
        Any key whose values are dicts for some sub-envs only goes the exact way."""
        n = self.num_envs
        keys: dict[str, tuple[list[int], list[Any]]] = {}
        for i, info in pairs:
            for key, value in info.items():
                col = keys.get(key)
                if col is None:
                    keys[key] = ([i], [value])
                else:
                    col[0].append(i)
                    col[1].append(value)
        out: dict[str, Any] = {}
        for key, (idx, values) in keys.items():
            full = idx == self._every
            nested = [isinstance(v, dict) for v in values]
            if key != "final_obs" and any(nested):
                if not all(nested):
                    out = {}
                    for i, info in pairs:
                        out = self._add_info(out, info, i)
                    return out
                out[key] = self._stack(list(zip(idx, values)))
            else:
                first = values[0]
                kind = type(first)
                numeric = kind in (int, float, bool) or isinstance(first, np.number)
                if full and key != "final_obs" and (numeric or kind is str) and all(type(v) is kind for v in values):
                    # one type everywhere: the same array as assigning one by one (str: objects)
                    array = np.array(values, dtype=kind if numeric else object)
                else:
                    if key == "final_obs" or not (numeric or isinstance(first, np.ndarray)):
                        array = np.full(n, fill_value=None, dtype=object)
                    elif isinstance(first, np.ndarray):
                        array = np.zeros((n, *first.shape), dtype=first.dtype)
                    else:
                        array = np.zeros(n, dtype=kind)
                    for i, value in zip(idx, values):
                        array[i] = value
                out[key] = array
            if full:
                out[f"_{key}"] = np.ones(n, dtype=np.bool_)
            else:
                mask = np.zeros(n, dtype=np.bool_)
                mask[idx] = True
                out[f"_{key}"] = mask
        return out

    def _batch(self):
        if self._text_obs and _STR.issuperset(map(type, self._env_obs)):
            # what concatenate() gives for Text (a tuple), and a deep copy of a tuple of str is itself
            self._observations = tuple(self._env_obs)
            return self._observations
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        return deepcopy(self._observations) if self.copy else self._observations

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        return tuple(r for answer in self._send("call", [(name, args, kwargs)] * self.workers) for r in answer)

    def render(self) -> tuple[Any, ...]:
        return self.call("render")

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"values must have length num_envs={self.num_envs}, got {len(values)}")
        self._send("set_attr", [(name, v) for v in self._split(list(values))])

    def close_extras(self, **kwargs: Any) -> None:
        """Ask the workers to close their sub-envs; after CLOSE_GRACE, SIGTERM, then SIGKILL. Never hangs."""
        self._closed = True
        for pipe, proc in zip(self._pipes, self._procs):
            if proc.is_alive():
                try:
                    pipe.send(("close", None))
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + CLOSE_GRACE
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for stop in (lambda p: p.terminate(), lambda p: p.kill()):
            for proc in self._procs:
                if proc.is_alive():
                    stop(proc)
                    proc.join(1.0)
        for pipe in self._pipes:
            pipe.close()
        if self._local:
            self._local.close()

    def close(self, **kwargs: Any) -> None:
        if not self.closed:
            self.closed = True  # first: close_extras may run again from an error inside it
            self.close_extras(**kwargs)

    @property
    def worker_pids(self) -> list[int]:
        return [p.pid for p in self._procs if p.pid is not None]

