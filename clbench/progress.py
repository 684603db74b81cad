"""Progress of a run: rich bars on a terminal, plain lines otherwise, nothing when quiet.

The display follows results.jsonl as it grows (whatever executor wrote it), so it shows per
rollout the instances done, the mean reward so far, the ETA and, for LLM agents, tokens and cost.
"""
from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

from clbench.results import RESULTS_FILE, _parse_whole
from clbench.run_dir import POLICY_LOOK_SECONDS


def plain_output() -> bool:
    return bool(os.environ.get("CI")) or not sys.stderr.isatty()


class RunProgress:
    """Tracks (task, system, mode, rollout) streams; `expected` gives each stream's instance count."""

    def __init__(self, out: Path, expected: dict[tuple, int], quiet: bool = False, policy=None,
                 on_stop=None):
        self.out = Path(out)
        self.policy = policy  # clbench.error_policy.ErrorPolicy: sees every record, may stop the run
        self.on_stop = on_stop  # called once with the reason when the policy trips
        self.expected = expected
        self.quiet = quiet
        self.plain = plain_output()
        self.offset = (self.out / RESULTS_FILE).stat().st_size if (self.out / RESULTS_FILE).exists() else 0
        self.stats = {k: {"n": 0, "reward": 0.0, "tokens": 0, "cost": None, "errors": 0} for k in expected}
        self._stopped = False
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the follower thread and `poll` read on from one offset
        self._thread = None
        self._progress = None
        self._bars = {}

    def __enter__(self):
        if not self.quiet and not self.plain:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[extra]}"), TimeRemainingColumn(), transient=False)
            self._progress.start()
            for key, total in self.expected.items():
                task, system, mode, k = key
                label = f"{task}/{system} {mode}" + (f" r{k}" if mode == "stateful" else "")
                self._bars[key] = self._progress.add_task(label, total=total, extra="")
        if not self.quiet or self.policy is not None:
            self._thread = threading.Thread(target=self._follow, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        if not self.quiet or self.policy is not None:  # quiet without a policy: nothing to read back for
            self.poll()
        if self._progress is not None:
            self._progress.stop()

    def _follow(self):
        while not self._stop.wait(POLICY_LOOK_SECONDS):
            self.poll()

    def poll(self):
        """Read the records written since the last look (and let the policy see them) now: the inline
        executor calls it after writing an errored or faulted instance, so that the policy stops a
        one-worker run before its next instance, not half a second of instances later."""
        with self._lock:
            self._poll()

    def _poll(self):
        path = self.out / RESULTS_FILE
        if not path.exists():
            return
        with open(path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        end = data.rfind(b"\n")
        if end < 0:
            return
        self.offset += end + 1
        if self.quiet and self.policy is not None and _INFRASTRUCTURE not in data and _FAULTS not in data:
            # nothing to show, and no line holds an infrastructure error or a model fault: each is one
            # finished instance
            self.policy.observe_many(data.count(b"\n", 0, end + 1))
            return
        lines = data[: end + 1].splitlines()
        if self.quiet:  # nothing to show: only the policy looks, and only at infrastructure errors and faults
            self._observe_lines(lines)
            return
        whole = _parse_whole(lines)  # one json.loads for the lot; line by line when one is torn
        for rec in (obj for _, obj in whole) if whole is not None else map(_loads, lines):
            try:
                key = (rec["task"], rec["system"], rec["mode"], int(rec["rollout"]))
            except (KeyError, TypeError, ValueError):
                continue
            if key in self.stats:
                self._update(key, rec)

    def _update(self, key, rec):
        st = self.stats[key]
        st["n"] += 1
        errored = bool(rec.get("error"))
        st["errors"] += errored
        if errored:  # an errored instance is no score: the mean is over the others
            st["reward"] -= float(rec.get("reward") or 0.0)
        st["reward"] += float(rec.get("reward") or 0.0)
        tokens = rec.get("tokens") or {}
        st["tokens"] += int(tokens.get("prompt", 0) or 0) + int(tokens.get("completion", 0) or 0)
        if rec.get("cost") is not None:
            st["cost"] = (st["cost"] or 0.0) + float(rec["cost"])
        scored = st["n"] - st["errors"]
        extra = (f"mean reward {st['reward'] / scored:.3f}" if scored else "mean reward n/a") + f" | {st['errors']} errored"
        if st["tokens"]:
            extra += f" | {st['tokens']} tok"
        if st["cost"] is not None:
            extra += f" | ${st['cost']:.4f}"
        if self._progress is not None:
            self._progress.update(self._bars[key], completed=st["n"], extra=extra)
        elif errored and not self.quiet:  # plain output: every errored instance gets its line
            task, system, mode, k = key
            print(f"  ERRORED {task}/{system} {mode} r{k} {rec.get('instance_id')} ({st['errors']} errored in this "
                  f"stream, {st['n']}/{self.expected[key]} done): {str(rec.get('error'))[:240]}",
                  file=sys.stderr, flush=True)
        if self._progress is None and st["n"] == self.expected[key] and not self.quiet:
            task, system, mode, k = key
            label = f"{task}/{system} {mode}" + (f" rollout {k}" if mode == "stateful" else " pass")
            print(f"  done {label}: {st['n']} instances, {extra}", file=sys.stderr, flush=True)
        self._observe(rec)

    def _observe_lines(self, lines: list[bytes]) -> None:
        """The policy's view of whole record lines, parsing only those that may hold an
        infrastructure error or a model fault: records are written compact with sorted keys, so any
        other line is a finished instance without either (parsing every record again was a visible
        part of short runs)."""
        if self.policy is None:
            return
        for line in lines:
            if _INFRASTRUCTURE not in line and _FAULTS not in line:
                self._observe({})
                continue
            rec = _loads(line)
            try:
                key = (rec["task"], rec["system"], rec["mode"], int(rec["rollout"]))
            except (KeyError, TypeError, ValueError):
                continue
            if key in self.stats:
                self._observe(rec)

    def _observe(self, rec):
        if self.policy is not None:
            reason = self.policy.observe(rec)
            if reason and not self._stopped:
                self._stopped = True
                if self.on_stop:
                    self.on_stop(reason)


#: the bytes of an infrastructure error's kind in a record line (clbench.results.dumps)
_INFRASTRUCTURE = b'"error_kind":"infrastructure"'
#: ... and of a record's model faults (present only when there are some)
_FAULTS = b'"model_faults":'


def _loads(line: bytes):
    try:
        return json.loads(line)
    except ValueError:
        return None

