"""The record format: append-only JSONL records and trajectory events, written and read back.

A record is keyed by (task, system, mode, rollout, instance_id) and carries `format`. Writers in
several processes append whole lines under an exclusive `flock`, so lines never interleave; a
line torn by a killed process is detected on load, dropped with a warning, and re-run on resume.

A trajectory file holds whole instances one after another: an instance's events start at its
"reset" event (carrying instance_id and position), preceded by the lifecycle shocks applied
before it (`split_instances`). Record format 1 kept one trajectory file per stateless instance;
format 2 keeps one file per stateless job. Where each file lives is clbench.run_dir's (the run
directory's one owner).

Lines are compact JSON objects with sorted keys, NaN and infinities written as null. They are
encoded by orjson (`encode_lines`); a line with non-ASCII text, and every line of an install
without orjson, by the stdlib's encoder, which escapes such text as \\uXXXX. The two spell a float
with the same shortest digits and differ only in the exponent's padding (`4.1e-5` and `4.1e-05`),
so any JSON reader reads the same values from either; runs written before orjson read as before.
"""
from __future__ import annotations

import fcntl
import json
import math
import os
import warnings
from functools import lru_cache
from operator import itemgetter
from pathlib import Path
from typing import Iterable, Iterator

#: 2: stateless trajectories in one file per job instead of one per instance (see above)
RECORD_FORMAT = 2
RESULTS_FILE = "results.jsonl"
REQUIRED_FIELDS = ("task", "system", "mode", "rollout", "instance_id", "position", "variant", "reward")
_REQUIRED = frozenset(REQUIRED_FIELDS)


class ResultsError(ValueError):
    """A results file or run directory that cannot be read."""


#: the fields that identify a record, read in C (record_key, and RunDirectory.records' uniqueness check)
record_fields = itemgetter("task", "system", "mode", "rollout", "instance_id")


def record_key(rec: dict) -> tuple:
    task, system, mode, rollout, instance_id = record_fields(rec)
    return task, system, mode, int(rollout), instance_id


def _json_default(obj):
    if getattr(obj, "ndim", 0) and hasattr(obj, "tolist"):  # numpy arrays (item() takes one element only)
        return obj.tolist()
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


#: json.dumps with these options, built once: json.dumps builds an encoder per call
_STRICT = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_json_default, allow_nan=False)


try:  # _STRICT's C encoder itself, built once: JSONEncoder.encode builds one per call (most of a line's
    # cost). No circular check (records are trees): a marker table would outlive an encode that failed
    from json.encoder import c_make_encoder as _c_make_encoder, encode_basestring_ascii as _ascii

    _C_STRICT = _c_make_encoder(None, _json_default, _ascii, None, ":", ",", True, False, False) \
        if _c_make_encoder is not None else None
except ImportError:  # a Python without the C accelerator
    _C_STRICT = None


def dumps(obj) -> str:
    """Compact, key-sorted, NaN-free JSON (NaN/inf become null) for byte-stable files."""
    try:  # the C encoder alone when every float is finite (nearly always): walking first cost 20x
        if _C_STRICT is not None and type(obj) is dict:
            return "".join(_C_STRICT(obj, 0))
        return _STRICT.encode(obj)
    except ValueError:
        return json.dumps(_finite(obj), sort_keys=True, separators=(",", ":"), default=_json_default)


def _finite(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


try:  # records and trajectory lines: the Rust encoder, an order of magnitude faster than the C one
    import orjson as _orjson

    _ORJSON_LINE = _orjson.OPT_SORT_KEYS | _orjson.OPT_APPEND_NEWLINE
except ImportError:  # an install without it writes the same values through `dumps`
    _orjson = None


def encode_lines(objs: Iterable[dict]) -> bytes:
    """JSON lines (one object a line, compact, keys sorted, NaN/inf as null) as the bytes a file holds.

    Each line is `dumps(o)` up to how a float is spelled: orjson writes the same shortest digits
    but small and large exponents without padding (`4.1e-5`, not `4.1e-05`), so a line reads back
    to the same values with any JSON reader. A line that is not plain ASCII (the stdlib escapes
    such text as \\uXXXX) or that orjson refuses (an integer beyond 64 bits, a key that is not a
    string, deep nesting) is `dumps(o)` itself."""
    out = bytearray()
    encode_into(out, objs)
    return bytes(out)


def encode_into(out: bytearray, objs: Iterable[dict]) -> None:
    """Append `encode_lines(objs)` to `out`. One growing buffer, each line's bytes freed once copied
    in: holding every line as its own bytes object until a join cost more than encoding them (each
    a fresh allocation of untouched memory, page faults included, which callgrind does not count:
    6.2 vs 1.3 ms CPU for a Poker run's trajectories held in 128 KiB batches)."""
    if _orjson is None:
        for o in objs:
            out += (dumps(o) + "\n").encode()
        return
    encode, default, option = _orjson.dumps, _json_default, _ORJSON_LINE
    for o in objs:  # a function call per line showed in a cheap env's run
        try:
            line = encode(o, default=default, option=option)
        except TypeError:  # orjson.JSONEncodeError is one
            line = None
        # orjson's line, or `dumps(o)` where orjson refuses it or the line is not plain ASCII
        out += line if line is not None and line.isascii() else (dumps(o) + "\n").encode()


def append_lines(path: Path, objs: Iterable[dict]) -> None:
    """Append whole JSON lines under an exclusive lock and flush them to the OS."""
    data = encode_lines(objs)
    if not data:
        return
    fd = _open_append(path)
    try:
        _write_locked(fd, data)
    finally:
        os.close(fd)


class AppendFiles:
    """`append_lines` on files kept open between appends, at most `keep` at a time (least recently
    used closed first). Every append is one write to the OS, so what a killed process leaves is the
    same; only the open (and mkdir) per append is saved, which cost more than the write in a
    rollout. Files in `shared` (written by several processes: results.jsonl) take the lock and end
    a torn last line at every append; the others have one writer while open (a job's own
    trajectory file), so that is done once when they are opened. For one writer's lifetime (a
    job): call `close` when done."""

    def __init__(self, keep: int = 8, shared: Iterable[str | Path] = ()):
        self.keep = keep
        self.shared = frozenset(shared)
        self._fds: dict[str | Path, int] = {}  # insertion order = least recently used first

    def append(self, path: str | Path, objs: Iterable[dict]) -> None:
        self.write(path, encode_lines(objs))

    def write(self, path: str | Path, data: bytes | bytearray) -> None:
        """Append whole lines already encoded (`encode_lines`), e.g. by a remote worker."""
        if not data:
            return
        fd = self._fds.pop(path, None)
        if fd is None:
            fd = _open_append(path)
            if path not in self.shared:
                _write_locked(fd, b"")  # a line torn by an earlier, killed writer is ended
        self._fds[path] = fd
        if len(self._fds) > self.keep:
            os.close(self._fds.pop(next(iter(self._fds))))
        if path in self.shared:
            _write_locked(fd, data)
        else:
            _write_all(fd, data)

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.popitem()[1])


def _open_append(path: str | Path) -> int:
    """Open (creating) a file to append to; its folders are made only when missing (a pathlib
    mkdir per open, exception and stat included, showed in a short run's profile)."""
    try:
        return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)


def _write_locked(fd: int, data: bytes) -> None:
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        _repair_torn_tail(fd)
        _write_all(fd, data)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _repair_torn_tail(fd: int) -> None:
    """If a killed writer left a partial last line, end it so the next record starts cleanly."""
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        os.write(fd, b"\n")


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) of a JSONL file; torn or corrupt lines are dropped with a warning."""
    with open(path, "rb") as fh:
        lines = fh.read().split(b"\n")
    whole = _parse_whole(lines)
    if whole is not None:
        yield from whole
        return
    for no, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
            if not isinstance(obj, dict):
                raise ValueError("not an object")
        except ValueError:
            what = "torn last line" if no >= len(lines) - 1 else "corrupt line"
            warnings.warn(f"{path}:{no}: {what} dropped ({raw[:60]!r}...)", stacklevel=2)
            continue
        yield no, obj


def _parse_whole(lines: list[bytes]) -> list[tuple[int, dict]] | None:
    """Every line parsed in one json.loads (a C call, not one per line), or None when a line is
    not one whole JSON object (torn or corrupt: the caller then goes line by line). A torn line
    never joins the next into a valid array: it opens an object that complete lines cannot close."""
    numbers = [no for no, raw in enumerate(lines, 1) if raw.strip()]
    try:
        objs = json.loads(b"[" + b",".join(lines[no - 1] for no in numbers) + b"]")
    except ValueError:
        return None
    if len(objs) != len(numbers) or not all(type(o) is dict for o in objs):
        return None
    return list(zip(numbers, objs))


def load_records(run_dir: str | Path, replaced: list[dict] | None = None) -> list[dict]:
    """All valid records of a run directory; a later record of a key replaces an earlier one (the one
    place that rule lives). `replaced`, when given, receives the records replaced, in file order."""
    path = Path(run_dir) / RESULTS_FILE
    if not path.is_file():
        raise ResultsError(f"{run_dir}: no {RESULTS_FILE} (is this a clbench run directory?)")
    by_key: dict[tuple, dict] = {}
    for no, rec in iter_jsonl(path):
        if not _REQUIRED.issubset(rec):
            missing = [f for f in REQUIRED_FIELDS if f not in rec]
            warnings.warn(f"{path}:{no}: record without {missing} dropped", stacklevel=2)
            continue
        if rec.get("format", RECORD_FORMAT) > RECORD_FORMAT:
            raise ResultsError(f"{path}:{no}: record format {rec['format']} is newer than this clbench "
                               f"({RECORD_FORMAT}); upgrade clbench")
        bad = malformed(rec)
        if bad:
            warnings.warn(f"{path}:{no}: record dropped: {bad}", stacklevel=2)
            continue
        key = record_key(rec)
        if replaced is not None and key in by_key:
            replaced.append(by_key[key])
        by_key[key] = rec
    return list(by_key.values())


def replaced_costs(replaced: Iterable[dict]) -> dict[tuple[str, str], float]:
    """USD spent, per (task, system), on the records a later one replaced (`load_records`' `replaced`):
    instances played again on `--resume` (an errored one, or a stateful rollout restarted). The metrics
    count each instance's last record only, so without this a resumed run's cost would leave out what
    its first attempts cost."""
    spent: dict[tuple[str, str], float] = {}
    for rec in replaced:
        if isinstance(rec.get("cost"), (int, float)):
            key = (rec["task"], rec["system"])
            spent[key] = spent.get(key, 0.0) + float(rec["cost"])
    return spent


def malformed(rec: dict) -> str | None:
    """What is wrong with a record's key and reward fields, or None (a hand-edited or corrupted
    file must fail where it is wrong, not deep inside the metrics)."""
    reward = rec["reward"]
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        return f"reward {reward!r} is not a finite number"
    if rec["mode"] not in ("stateful", "stateless"):
        return f"mode {rec['mode']!r} is neither stateful nor stateless"
    for name in ("rollout", "position"):
        if isinstance(rec[name], bool) or not isinstance(rec[name], int) or rec[name] < 0:
            return f"{name} {rec[name]!r} is not a whole number >= 0"
    for name in ("task", "system", "instance_id"):
        if not isinstance(rec[name], str) or not rec[name]:
            return f"{name} {rec[name]!r} is not a name"
    return None


def all_well_formed(recs: list[dict]) -> bool:
    """`not any(malformed(r) for r in recs)`, read a field at a time over all records (a function call
    per record was a visible part of a short run); any doubt goes to `malformed`, record by record."""
    try:
        rewards = [r["reward"] for r in recs]
        plain = all(not issubclass(t, bool) and issubclass(t, (int, float)) for t in set(map(type, rewards))) \
            and math.isfinite(math.fsum(rewards))
        plain = plain and {r["mode"] for r in recs} <= {"stateful", "stateless"}
        for name in ("rollout", "position"):
            plain = plain and all(not isinstance(v, bool) and isinstance(v, int) and v >= 0 for v in {r[name] for r in recs})
        for name in ("task", "system", "instance_id"):
            plain = plain and all(isinstance(v, str) and v for v in {r[name] for r in recs})
    except (TypeError, ValueError, OverflowError):  # unhashable values, inf - inf, a sum beyond floats
        plain = False
    return plain or not any(malformed(r) for r in recs)


def completeness(run_dir: str | Path, records: list[dict]) -> list[str]:
    """What a finished run directory lacks: stateful rollouts or stateless passes with fewer instances
    than the schedule has, and planned rollouts with no record at all (from config.json and
    metadata.json). Empty when every planned record is there."""
    meta = load_metadata(run_dir)
    try:
        runs = read_json(Path(run_dir) / "config.json").get("runs", [])
    except ResultsError:
        runs = []
    sizes = {task: params.get("instances") for task, params in meta.get("tasks", {}).items()}
    found: dict[tuple, set] = {}
    for rec in records:
        found.setdefault((rec["task"], rec["system"], rec["mode"], rec["rollout"]), set()).add(rec["instance_id"])
    problems = []
    for (task, system, mode, rollout), ids in sorted(found.items()):
        size = sizes.get(task)
        if mode == "stateful" and size and len(ids) < size:
            problems.append(f"{task}/{system}: stateful rollout {rollout} has {len(ids)} of {size} instances")
    for run in runs:
        task = next((t for t, p in meta.get("tasks", {}).items() if p.get("env_id") == run.get("env_id")), None)
        system = run.get("system") or run.get("agent")
        if task is None or run.get("mode", "both") == "stateless":
            continue
        have = {r for (t, s, m, r) in found if (t, s, m) == (task, system, "stateful")}
        missing = sorted(set(range(int(run.get("rollouts", 0)))) - have)
        if missing:
            problems.append(f"{task}/{system}: stateful rollout(s) {missing} have no record")
    for (task, system, mode, rollout), ids in sorted(found.items()):
        size = sizes.get(task)
        if mode == "stateless" and size:
            everything = set().union(*(i for (t, s, m, _), i in found.items() if (t, s, m) == (task, system, mode)))
            if len(everything) < size:
                problems.append(f"{task}/{system}: the stateless pass covers {len(everything)} of {size} instances")
                break
    return problems


def write_json_atomic(path: str | Path, obj) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(pretty(obj) + "\n")
    os.replace(tmp, path)


#: the C encoder for `pretty`'s leaves: readable separators, sorted keys, NaN refused (then _finite)
_C_LEAF = _c_make_encoder(None, _json_default, _ascii, None, ": ", ", ", True, False, False) \
    if _C_STRICT is not None else None


def pretty(obj, indent: str = "") -> str:
    """Indented, key-sorted JSON with NaN/inf as null (run cards, metadata, config): dicts one key
    a line, lists of plain values (curves) on one line. The leaves go through the C encoder (the
    stdlib's indenting encoder is pure Python, and writing a run card with it cost more than its
    bootstrap's percentiles)."""
    inner = indent + "  "
    if type(obj) is dict and obj:
        items = sorted(obj.items())
        return "{\n" + ",\n".join(f"{inner}{_leaf(k if type(k) is str else str(k))}: {pretty(v, inner)}"
                                   for k, v in items) + f"\n{indent}}}"
    if type(obj) in (list, tuple) and not _NESTED.isdisjoint(map(type, obj)):  # the item types, read in C
        return "[\n" + ",\n".join(inner + pretty(v, inner) for v in obj) + f"\n{indent}]"
    return _leaf(obj)


_NESTED = frozenset((dict, list, tuple))


def _leaf(obj) -> str:
    if _C_LEAF is not None:  # a string or a float as the C encoder spells it, without a call into it
        if type(obj) is str:
            return _ascii(obj)
        if type(obj) is float:
            return float.__repr__(obj) if math.isfinite(obj) else "null"
    try:
        if _C_LEAF is not None:
            return "".join(_C_LEAF(obj, 0))
        return json.dumps(obj, sort_keys=True, default=_json_default, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), sort_keys=True, default=_json_default)


def read_json(path: str | Path) -> dict:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ResultsError(f"missing {path}") from None
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path} is not valid JSON: {exc}") from None


def load_metadata(run_dir: str | Path) -> dict:
    return read_json(Path(run_dir) / "metadata.json")


def split_instances(events: Iterable[dict]) -> list[list[dict]]:
    """A trajectory file's events cut into instances: each starts at its shocks or its reset.
    Shocks not followed by a reset (a kill before the instance began) form a group without one."""
    groups: list[list[dict]] = []
    for ev in events:
        after_shock = bool(groups) and groups[-1][-1].get("event") == "shock"
        if not groups or ev.get("event") in ("shock", "reset") and not after_shock:
            groups.append([])
        groups[-1].append(ev)
    return groups


def reset_of(group: list[dict]) -> dict | None:
    """The reset event of one instance's events (None for shocks without their instance)."""
    return next((ev for ev in group if ev.get("event") == "reset"), None)


@lru_cache(maxsize=4096)
def safe_name(name: str) -> str:
    """A file-name-safe form of a system or instance name."""
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in name)

