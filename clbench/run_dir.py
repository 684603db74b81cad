"""The run directory: the one module that names, writes, locks and reads back a run's files.

Layout (the record format is clbench.results; these paths are this module's)::

    config.json            resolved configuration of every (env, system) run in the directory
    metadata.json          clbench version, git sha, env ids and versions, tasks' r_max/r_reference
    results.jsonl          one record per instance per rollout (append-only, batches of whole lines)
    trajectories/<task>/<system>/stateful-r<k>.jsonl          every step of stateful rollout k
    trajectories/<task>/<system>/stateless-r<p>-<first>.jsonl every step of one stateless job of
                           pass p (a chunk of instances, named after its first instance id)
    transcripts/...        the trajectory files' twins for agents that keep transcripts
    state/<task>/<system>/stateful-r<k>.jsonl                 the agent state journal (resume)
    run_card.json          headline metrics, curves, cost and tokens, provenance
    .writer.lock           held by the one clbench process writing the directory
    STOP                   written by the error policy: jobs stop before their next instance

`RunDirectory` owns the layout, the writer lock, config and metadata, the resume bookkeeping
(which instances are done, what a restarted or resumed rollout keeps) and reading back.
`LocalSink` appends for jobs (records, trajectories, transcripts, agent-state checkpoints) and
`JobFiles` is one job's view of it: the runner hands it finished instances and never names a file
(they are written in batches, at least every FLUSH_SECONDS).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path

from clbench.results import (RESULTS_FILE, AppendFiles, ResultsError, _json_default, _open_append, all_well_formed,
                             _write_locked, append_lines, encode_into, iter_jsonl, load_metadata, load_records,
                             read_json, record_fields, reset_of, safe_name, split_instances,
                             write_json_atomic)

#: written into a run directory by the driver's error policy: jobs stop before their next instance
STOP_FILE = "STOP"
#: a job writes its finished instances, and looks for STOP, at least this often (JobFiles): a kill
#: loses at most this much play, which --resume plays again
FLUSH_SECONDS = 0.25
#: the driver's error policy reads the records written since its last look this often (RunProgress)
POLICY_LOOK_SECONDS = 0.5
#: ... and once its buffers hold this many bytes of lines: a job's memory stays bounded (buffers of
#: megabytes, freed at once and allocated again, made each new line several times dearer than encoding it)
FLUSH_BYTES = 1 << 17
#: the lock file of a run directory; held by the one clbench process writing it
RUN_LOCK = ".writer.lock"
TRAJECTORIES, TRANSCRIPTS, STATE = "trajectories", "transcripts", "state"


class RunDirectoryBusy(RuntimeError):
    """Another clbench process writes this run directory."""


# ---------------------------------------------------------------- layout (paths are functions of the root)
def trajectory_dir(run_dir: str | Path, task: str, system: str) -> Path:
    return Path(run_dir) / TRAJECTORIES / task / safe_name(system)


def trajectory_path(run_dir: str | Path, task: str, system: str, mode: str, rollout: int) -> Path:
    """The trajectory file of one stateful rollout (`mode` "stateful"; a stateless pass writes one
    file per job: stateless_trajectory)."""
    return trajectory_dir(run_dir, task, system) / f"{mode}-r{rollout}.jsonl"


def stateless_trajectory(run_dir: str | Path, task: str, system: str, p: int, first_id: str) -> Path:
    """The trajectory file of the stateless job of pass `p` whose first instance is `first_id`."""
    return trajectory_dir(run_dir, task, system) / f"stateless-r{p}-{safe_name(first_id)}.jsonl"


def stateless_trajectories(run_dir: str | Path, task: str, system: str, p: int) -> list[Path]:
    """Every job's trajectory file of stateless pass `p`."""
    return sorted(trajectory_dir(run_dir, task, system).glob(f"stateless-r{p}-*.jsonl"))


def legacy_stateless_trajectory(run_dir: str | Path, task: str, system: str, p: int, instance_id: str) -> Path:
    """Record format 1: one file per stateless instance (pass 0 in `stateless/`)."""
    folder = "stateless" if p == 0 else f"stateless-pass{p}"
    return trajectory_dir(run_dir, task, system) / folder / f"{safe_name(instance_id)}.jsonl"


def state_path(run_dir: str | Path, task: str, system: str, rollout: int) -> Path:
    """The journal a stateful rollout appends its agent state to at instance boundaries."""
    return Path(run_dir) / STATE / task / safe_name(system) / f"stateful-r{rollout}.jsonl"


def instance_trajectory(run_dir: str | Path, task: str, system: str, mode: str, rollout: int,
                        instance_id: str) -> list[dict]:
    """Every event of one instance of one rollout or pass ([] if none was written), either layout."""
    if mode == "stateful":
        paths = [trajectory_path(run_dir, task, system, mode, rollout)]
    else:
        paths = [*stateless_trajectories(run_dir, task, system, rollout),
                 legacy_stateless_trajectory(run_dir, task, system, rollout, instance_id)]
    for path in paths:
        if path.exists():
            for group in reversed(split_instances(ev for _, ev in iter_jsonl(path))):
                reset = reset_of(group)
                if reset is not None and reset.get("instance_id") == instance_id:
                    return group
    return []


def stop_requested(out: str | Path) -> bool:
    return os.path.exists(os.path.join(out, STOP_FILE))


# ---------------------------------------------------------------- agent-state checkpoints
#: a journal is compacted to its newest line once it outgrows that line this many times (and 1 MiB):
#: disk stays bounded and compaction costs O(1) amortized per checkpoint
_JOURNAL_SLACK = 8
_JOURNAL_MIN_BYTES = 1 << 20


def state_line(position: int, state) -> bytes:
    """One checkpoint as a compact JSON line (C encoder; NaN kept, so a state round-trips exactly)."""
    return (json.dumps({"position": position, "state": state}, separators=(",", ":"),
                       default=_json_default) + "\n").encode()


def append_checkpoint(path: str | Path, line: bytes) -> None:
    """Append one checkpoint to a state journal: a single O_APPEND write, no rewrite of older state.

    Cost per instance is the size of the state, not of the history (rewriting and renaming a file
    per instance made checkpoints most of a run). A SIGKILL leaves whole lines, or at worst a torn
    last line that `load_checkpoint` skips and the next append starts after.
    """
    path = Path(path)
    fd = _open_append(path)
    try:
        if os.fstat(fd).st_size > max(_JOURNAL_MIN_BYTES, _JOURNAL_SLACK * len(line)):
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(line)
            os.replace(tmp, path)  # atomic: a reader sees the old journal or the compacted one
            return
        _write_locked(fd, line)  # the records' append: a torn last line is ended first
    finally:
        os.close(fd)


def load_checkpoint(path: str | Path) -> dict | None:
    """The newest whole checkpoint {"position", "state"} of a journal, or None.

    Runs written before the journal kept one JSON file per rollout (`stateful-rK.json`); it is read
    when there is no journal.
    """
    path = Path(path)
    legacy = path.with_suffix(".json")
    if not path.exists():
        return read_json(legacy) if legacy.exists() else None
    for raw in reversed(path.read_bytes().split(b"\n")):
        try:
            saved = json.loads(raw)
        except ValueError:  # blank or torn line
            continue
        if isinstance(saved, dict) and "position" in saved and "state" in saved:
            return saved
    return None


# ---------------------------------------------------------------- writing for jobs
class LocalSink:
    """Appends into the run directory directly (workers share the driver's filesystem). The sink
    interface executors relay (e.g. from Ray workers): `append(rel, lines)`, `checkpoint(rel, line)`,
    paths relative to the run directory; `write(rel, data)` appends lines encoded elsewhere."""

    def __init__(self, out: str | Path, poll=None):
        self.out = Path(out)
        self._root = str(out)
        self.poll = poll  # called (in this process) before a job looks for STOP after an errored or faulted instance
        # results.jsonl is appended by every worker; trajectory and transcript files by their job alone
        self.files = AppendFiles(shared={os.path.join(self._root, RESULTS_FILE)})

    def append(self, rel: str, lines: list[dict]) -> None:
        self.files.append(os.path.join(self._root, rel), lines)  # str, not Path: a Path per append showed in profiles

    def write(self, rel: str, data: bytes | bytearray) -> None:
        """Append lines encoded already (clbench.results.encode_lines), by a job here or remote."""
        self.files.write(os.path.join(self._root, rel), data)

    def checkpoint(self, rel: str, line: bytes) -> None:
        append_checkpoint(os.path.join(self._root, rel), line)

    def close(self) -> None:
        self.files.close()


class JobFiles:
    """One job's files, written through a sink: its trajectory file and transcript twin, the
    records, and (stateful) the agent-state journal. Finished instances are written together, at
    least every FLUSH_SECONDS or FLUSH_BYTES, and at once after an errored or faulted instance, before a
    checkpoint and when the job ends (`close`): trajectory, then transcripts, then their records (a
    record on disk means its trajectory is too). A file's bytes are those of writing each instance
    at once. An instance is encoded when it is handed over (clbench.results.encode_into): until the
    flush a job holds one buffer of lines per file, not every event's dicts and observations."""

    def __init__(self, sink, out: str | Path, trajectory: Path, journal: Path | None = None):
        self.sink, self.out = sink, str(out)
        self.trajectory = os.path.relpath(trajectory, self.out)
        self.journal = os.path.relpath(journal, self.out) if journal is not None else None
        self._encoder = None  # transcripts: opened on the first instance that has one
        self._traj = bytearray()
        self._transcripts: list[dict] = []
        self._records = bytearray()
        self._flushed = time.perf_counter()
        self._stop_checked = float("-inf")
        self._alert = False  # the last instance errored or stands on model faults: the policy may trip on it

    def stop_requested(self) -> bool:
        """The stop flag, looked up at most every FLUSH_SECONDS (a stat per instance showed in cheap runs),
        and at once after an errored or faulted instance. A sink that can `poll` (the inline executor's)
        first lets the error policy read that instance, so a one-worker run stops right at its threshold."""
        now = time.perf_counter()
        if self._alert:
            self._alert = False
            poll = getattr(self.sink, "poll", None)
            if poll is not None:
                poll()
        elif now - self._stop_checked < FLUSH_SECONDS:
            return False
        self._stop_checked = now
        return stop_requested(self.out)

    def _await_policy(self) -> None:
        """After an instance lost to an infrastructure error, in a process whose driver reads the records on
        its own (a pool or Ray worker): wait for the driver's next look (two POLICY_LOOK_SECONDS at most, less
        once it stops the run) before the next instance, of this job or the next. Without it the workers of a
        dead endpoint's run played on while the driver read: a run stopped at --max-consecutive-errors 3 had
        recorded 6 errored instances, its whole schedule. An errored instance has spent its retries already:
        the wait adds under a second to it."""
        deadline = time.perf_counter() + 2 * POLICY_LOOK_SECONDS
        while not stop_requested(self.out) and time.perf_counter() < deadline:
            time.sleep(0.02)

    def instance(self, traj: list[dict], record: dict, info: dict, transcript: list[dict] | None) -> None:
        encode_into(self._traj, traj)
        if transcript:
            from clbench.llm.transcripts import Encoder

            if self._encoder is None:
                self._encoder = Encoder()
            self._transcripts.append(self._encoder.encode(info["instance_id"], info["position"], transcript))
        encode_into(self._records, (record,))
        if record.get("error") or record.get("model_faults"):  # written at once: the error policy counts them
            self._alert = True
            self.flush()
            if record.get("error_kind") == "infrastructure" and getattr(self.sink, "poll", None) is None:
                self._await_policy()
        elif len(self._traj) + len(self._records) >= FLUSH_BYTES \
                or time.perf_counter() - self._flushed >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Write what finished instances are held back."""
        if self._traj:
            self.sink.write(self.trajectory, self._traj)
        if self._transcripts:
            from clbench.llm.transcripts import transcript_rel

            self.sink.append(transcript_rel(self.trajectory), self._transcripts)
        if self._records:
            self.sink.write(RESULTS_FILE, self._records)
        # new buffers, not cleared ones: a relaying sink (Ray's) holds the written ones until it sends them
        self._traj, self._transcripts, self._records = bytearray(), [], bytearray()
        self._flushed = time.perf_counter()

    def checkpoint(self, position: int, state) -> None:
        self.flush()  # the records a checkpoint covers are on disk before it
        self.sink.checkpoint(self.journal, state_line(position, state))

    def close(self) -> None:
        self.flush()


# ---------------------------------------------------------------- the directory
class RunDirectory:
    """A run directory: its layout, lock, config and metadata, resume bookkeeping and reading back."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.root)!r})"

    # layout
    @property
    def results(self) -> Path:
        return self.root / RESULTS_FILE

    def trajectory(self, task: str, system: str, rollout: int) -> Path:
        return trajectory_path(self.root, task, system, "stateful", rollout)

    def stateless_trajectory(self, task: str, system: str, p: int, first_id: str) -> Path:
        return stateless_trajectory(self.root, task, system, p, first_id)

    def journal(self, task: str, system: str, rollout: int) -> Path:
        return state_path(self.root, task, system, rollout)

    def transcript(self, trajectory: Path) -> Path:
        """A trajectory file's transcript twin (clbench.llm.transcripts keeps their format)."""
        return self.root / TRANSCRIPTS / os.path.relpath(trajectory, self.root / TRAJECTORIES)

    def job_files(self, sink, task: str, system: str, mode: str, rollout: int,
                  first_id: str | None = None) -> JobFiles:
        """What one job writes: stateful rollout `rollout`, or the stateless job of pass `rollout`
        whose first instance is `first_id` (one file per job, not per instance: creating it cost
        more than playing the instance; per job, not per pass: jobs of a pass run in parallel, and
        a file's bytes must not depend on that)."""
        if mode == "stateful":
            return JobFiles(sink, self.root, self.trajectory(task, system, rollout),
                            self.journal(task, system, rollout))
        return JobFiles(sink, self.root, self.stateless_trajectory(task, system, rollout, first_id))

    # the one writer
    @contextlib.contextmanager
    def writer(self):
        """Be the one writer of the directory for the with-block, or raise RunDirectoryBusy at once
        (two processes appending the same run, e.g. two `--resume`s, would duplicate its records).
        The lock goes with the process, however it ends, so a SIGKILLed run never leaves the
        directory locked. A stop flag left by a stopped run is cleared on the way in and out."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / RUN_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
                raise RunDirectoryBusy(f"{self.root} is being written by another clbench process ({holder}); "
                                       "wait for it to finish or stop it, then --resume") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}".encode(), 0)
            self.clear_stop()  # a stopped run's flag must not stop the resumed one
            yield self
            self.clear_stop()
        finally:
            os.close(fd)  # releases the lock

    def request_stop(self, reason: str) -> None:
        (self.root / STOP_FILE).write_text(reason + "\n")

    def clear_stop(self) -> None:
        (self.root / STOP_FILE).unlink(missing_ok=True)

    # config and metadata
    def config(self) -> dict:
        return read_json(self.root / "config.json")

    def record_config(self, runs: list[dict], executor: str) -> dict:
        """config.json lists every (env, system) run that wrote into this directory."""
        path = self.root / "config.json"
        conf = read_json(path) if path.exists() else {"format": 1, "runs": []}
        for run in runs:
            conf["runs"] = [r for r in conf["runs"]
                            if not (r["env_id"] == run["env_id"] and r["system"] == run["system"])]
            conf["runs"].append(run)
        conf["executor"] = executor
        write_json_atomic(path, conf)
        return conf

    def metadata(self) -> dict:
        return load_metadata(self.root)

    def merge_metadata(self, task: str, params: dict, system: dict, provenance: dict) -> dict:
        """Add a task and a system to metadata.json (a run dir may hold several of each)."""
        path = self.root / "metadata.json"
        meta = load_metadata(self.root) if path.exists() else {"format": 1, "tasks": {}, "systems": {}}
        meta.setdefault("tasks", {})[task] = params
        meta.setdefault("systems", {})[system["name"]] = system
        meta["provenance"] = provenance
        write_json_atomic(path, meta)
        return meta

    def write_run_card(self, card: dict) -> None:
        write_json_atomic(self.root / "run_card.json", card)

    # reading back
    def records(self, played: list[dict] | None = None) -> list[dict]:
        """The directory's records (clbench.results.load_records). `played`: every record this
        process wrote into a directory that held none before; when each is well-formed and its key
        unique, they are what reading results.jsonl back would give and are returned as they are
        (parsing the file again was a visible part of a short run); otherwise the file is read."""
        # the key fields read in C: record_key's int() is a no-op on the whole numbers all_well_formed requires
        if played is not None and all_well_formed(played) and len(set(map(record_fields, played))) == len(played):
            return list(played)
        return load_records(self.root)

    def transcript_bytes(self) -> tuple[int, int]:
        """(bytes on disk of every transcript file, instances they hold)."""
        if not (self.root / TRANSCRIPTS).is_dir():
            return 0, 0
        from clbench.llm.transcripts import transcript_bytes

        return transcript_bytes(self.root)

    def instance_trajectory(self, task: str, system: str, mode: str, rollout: int, instance_id: str) -> list[dict]:
        return instance_trajectory(self.root, task, system, mode, rollout, instance_id)

    # resume bookkeeping
    def done_keys(self, task: str, system: str) -> tuple[set[tuple], set[tuple]]:
        """(mode, rollout, instance_id) recorded for task/system: (completed, errored), by the records
        `load_records` keeps (the newest of each key; a malformed one is dropped, as the metrics drop
        it, so resume plays its instance again instead of leaving a hole)."""
        ok, bad = set(), set()
        if not self.results.exists():
            return ok, bad
        for rec in load_records(self.root):
            if rec["task"] == task and rec["system"] == system:
                (bad if rec.get("error") else ok).add((rec["mode"], rec["rollout"], rec["instance_id"]))
        return ok, bad

    def checkpoint(self, task: str, system: str, rollout: int) -> dict | None:
        """The newest agent-state checkpoint of a stateful rollout, or None."""
        return load_checkpoint(self.journal(task, system, rollout))

    def holds_files(self, task: str, system: str) -> bool:
        """Whether task/system has a trajectory, transcript or state folder here (a new run directory
        has none: no rollout to restart, no stateless job file to drop)."""
        name = safe_name(system)
        return any(os.path.isdir(os.path.join(self.root, kind, task, name)) for kind in (TRAJECTORIES, TRANSCRIPTS, STATE))

    def restart_rollout(self, task: str, system: str, rollout: int) -> None:
        """A stateful rollout that starts over: its journal, trajectory and transcript go."""
        journal, traj = self.journal(task, system, rollout), self.trajectory(task, system, rollout)
        journal.unlink(missing_ok=True)
        journal.with_suffix(".json").unlink(missing_ok=True)  # the journal's older, one-file form
        traj.unlink(missing_ok=True)
        self.transcript(traj).unlink(missing_ok=True)

    def continue_rollout(self, task: str, system: str, rollout: int, last: int) -> None:
        """A stateful rollout that continues after position `last`: later instances' events go."""
        keep_instances(self.trajectory(task, system, rollout), lambda reset: reset.get("position", 1 << 30) <= last)

    def drop_unrecorded_stateless(self, task: str, system: str, p: int, todo: list[str], ok: set) -> None:
        """Before pass p plays `todo` (again): only recorded instances stay in its trajectory files."""
        for path in stateless_trajectories(self.root, task, system, p):
            keep_instances(path, lambda reset: ("stateless", p, reset.get("instance_id")) in ok)
        if todo and legacy_stateless_trajectory(self.root, task, system, p, todo[0]).parent.is_dir():
            for iid in todo:  # record format 1: one file per instance
                legacy_stateless_trajectory(self.root, task, system, p, iid).unlink(missing_ok=True)

    # refusing to mix runs
    def check_new(self, runs: list[tuple[str, str]]) -> None:
        """Refuse a directory that would mix results: an existing file, a non-empty folder that is
        not a run directory, or a run directory that already holds one of `runs` ((env id, system));
        re-running those would append duplicate records (continuing them is `--resume`)."""
        path, out = self.root, self.root
        if path.exists() and not path.is_dir():
            raise ResultsError(f"--out {out} is an existing file, not a run directory")
        if not path.is_dir():
            return
        if (path / "config.json").is_file():
            listed = {(r.get("env_id"), r.get("system")) for r in read_json(path / "config.json").get("runs", [])}
            clash = [f"{env_id} / {system}" for env_id, system in runs if (env_id, system) in listed]
            if clash:
                raise ResultsError(f"{out} already holds a run of {', '.join(clash)}; continue it with "
                                   f"`--resume {out}` or choose another --out")
        elif any(path.iterdir()):
            raise ResultsError(f"--out {out} is an existing folder that is not a clbench run directory; "
                               "choose a new or empty folder")


def keep_instances(path: Path, keep) -> None:
    """Rewrite a trajectory file with only the instances whose reset event `keep` accepts (on
    resume: a half-written or unrecorded instance is dropped, and played again). Shocks go with
    their instance; shocks written before an instance that never started are dropped."""
    if not path.exists():
        return
    kept = [ev for group in split_instances(ev for _, ev in iter_jsonl(path))
            if (reset := reset_of(group)) is not None and keep(reset) for ev in group]
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    append_lines(tmp, kept)
    if tmp.exists():
        os.replace(tmp, path)
    else:
        path.unlink()


def check_out_dir(out: str | Path, runs: list[tuple[str, str]]) -> None:
    RunDirectory(out).check_new(runs)
