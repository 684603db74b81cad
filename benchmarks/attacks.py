"""Issue 31's must-show attacks, re-run on this code: one table, area | attacks | held | fell.

    python benchmarks/attacks.py [--quick]

- sandbox memory: a many-process memory bomb (8 children of 300 MB resident, 2.4 GB in all) under
  a 512 MB sandbox limit, in bubblewrap (cgroup, and the RSS-watchdog fallback) and in Docker;
  the number is the peak host memory taken meanwhile (MemAvailable drop, MB; other sessions'
  memory moves it too);
- /var/tmp fill: 200 MB written to bubblewrap's /var/tmp under a 64 MB disk quota (MB kept, peak
  host memory);
- SIGKILL of a `clbench rollout --workers 2` run: its workers still running and records appended
  30 s later;
- SIGKILL of a `--executor ray` run: seconds until no process of its Ray instance is left;
- two `clbench rollout --resume` of that directory at once: writers and duplicate records;
- `gym.make_vec` sync and async over every env (tests/test_vector.py).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
PY = sys.executable

BOMB = ("for i in 1 2 3 4 5 6 7 8; do python3 -c \"import time; b = bytearray(300 * 1024 * 1024); "
        "b[::4096] = b'x' * (len(b) // 4096); time.sleep(4)\" & done; wait; echo survived")


def _available_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return 0


def _peak(run) -> tuple[object, int]:
    """run(); its result and the largest MemAvailable drop (MB) meanwhile."""
    import threading

    base, low, done = _available_mb(), [_available_mb()], threading.Event()

    def sample():
        while not done.is_set():
            low[0] = min(low[0], _available_mb())
            time.sleep(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        result = run()
    finally:
        done.set()
        t.join()
    return result, base - low[0]


def sandbox_memory(backend: str, bound: str | None = None) -> tuple[bool, str]:
    from clbench.sandbox import Limits, open_sandbox
    from clbench.sandbox import cgroup
    from tests.test_sandbox import _docker_image, _runtime

    if backend == "docker" and _docker_image() is None:
        return None, "skipped: no Docker engine or test image"
    if bound:
        os.environ["CLBENCH_SANDBOX_BOUND"] = bound
    cgroup.mechanism.cache_clear()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "src").mkdir()
        sb = open_sandbox(Path(tmp) / "src", backend=backend, runtime=_runtime(backend), workdir="/testbed",
                          limits=Limits(timeout=60, memory_mb=512, processes=64, disk_mb=64))
        try:
            mechanism = cgroup.mechanism() if backend == "bwrap" else "docker cgroup"
            res, peak = _peak(lambda: sb.run(BOMB))
        finally:
            sb.close()
            os.environ.pop("CLBENCH_SANDBOX_BOUND", None)
            cgroup.mechanism.cache_clear()
    held = peak < 900  # the bomb would hold 2,400 MB
    return held, f"{mechanism}: peak host memory +{peak} MB (limit 512 MB; bomb 2,400 MB); {res.killed or 'not killed'}"


def var_tmp_fill() -> tuple[bool, str]:
    from clbench.sandbox import Limits, open_sandbox
    from tests.test_sandbox import _runtime

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "src").mkdir()
        sb = open_sandbox(Path(tmp) / "src", backend="bwrap", runtime=_runtime("bwrap"), workdir="/testbed",
                          limits=Limits(timeout=60, memory_mb=512, processes=64, disk_mb=64))
        try:
            res, peak = _peak(lambda: sb.run("for i in $(seq 10); do dd if=/dev/zero of=/var/tmp/f$i bs=1M count=20 "
                                             "2>/dev/null; done; du -sm /var/tmp | cut -f1"))
        finally:
            sb.close()
    kept = int(res.stdout.split()[-1])
    return kept <= 64, f"{kept} MB kept of 200 MB written (quota 64 MB); peak host memory +{peak} MB"


def _start(out: Path, *extra: str) -> subprocess.Popen:
    from _ratio import env_id

    return subprocess.Popen([PY, "-m", "clbench", "rollout", "--env", env_id("SpectrumMonitor"), "--agent",
                             "reference", "--rollouts", "10", "--workers", "2", "--quiet", "--out", str(out), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _kill_after(proc: subprocess.Popen, out: Path, records: int = 20) -> set[int]:
    """SIGKILL `proc` once `records` records are written; its descendants just before."""
    from tests.test_run_hardening import _descendants, _lines

    tree: set[int] = set()
    deadline = time.monotonic() + 300
    while _lines(out / "results.jsonl") < records:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the run ended before it could be killed")
        tree |= _descendants(proc.pid)
        time.sleep(0.1)
    tree |= _descendants(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return tree


def sigkill_pool(out: Path, wait: float) -> tuple[bool, str]:
    from tests.test_run_hardening import _lines, _running

    tree = _kill_after(_start(out), out)
    at_kill = _lines(out / "results.jsonl")
    time.sleep(wait)
    alive = [p for p in tree if _running(p)]
    grew = _lines(out / "results.jsonl") - at_kill
    return not alive and not grew, (f"{len(tree)} child processes at the kill, {len(alive)} running {wait:.0f} s later; "
                                    f"{grew} records appended after the kill")


def sigkill_ray(out: Path) -> tuple[bool, str]:
    from tests.test_run_hardening import _running

    tree = _kill_after(_start(out, "--executor", "ray"), out)
    t = time.monotonic()
    while [p for p in tree if _running(p)] and time.monotonic() - t < 60:
        time.sleep(0.1)
    left = [p for p in tree if _running(p)]
    return not left, f"{len(tree)} Ray-side processes at the kill; {len(left)} left, all gone after {time.monotonic() - t:.1f} s"


def concurrent_resumes(out: Path) -> tuple[bool, str]:
    """Two resumes of a killed run at once: one must write, the other refuse."""
    first = subprocess.Popen([PY, "-m", "clbench", "rollout", "--resume", str(out), "--quiet", "--workers", "2"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lock = out / ".writer.lock"
    deadline = time.monotonic() + 120
    while f"pid {first.pid}" not in (lock.read_text() if lock.exists() else ""):
        if first.poll() is not None or time.monotonic() > deadline:
            return False, "the first resume never took the lock"
        time.sleep(0.05)
    second = subprocess.run([PY, "-m", "clbench", "rollout", "--resume", str(out), "--quiet"], capture_output=True,
                            text=True, timeout=600)
    first.communicate(timeout=900)
    keys = Counter((r["mode"], r["rollout"], r["instance_id"])
                   for r in map(json.loads, (out / "results.jsonl").read_text().splitlines()) if r.get("error") is None)
    refused = second.returncode == 1 and "is being written by another clbench process" in second.stderr
    # a stateful rollout replays from its last checkpoint: at most 2 records per key with one writer
    held = refused and first.returncode == 0 and max(keys.values()) <= 2 and len(keys) == 990
    return held, (f"second resume {'refused in one line' if refused else 'RAN'}; {len(keys)} of 990 keys, "
                  f"at most {max(keys.values())} records per key; first resume exit {first.returncode}")


def make_vec() -> tuple[bool, str]:
    done = subprocess.run([PY, "-m", "pytest", str(ROOT / "tests/test_vector.py"), "-q", "-p", "no:cacheprovider"],
                          capture_output=True, text=True, timeout=1800, cwd=ROOT)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
    return done.returncode == 0, f"sync and async over every env: {last}"


def main(quick: bool = False) -> list:
    rows = []

    def row(area, attack, fn, *args):
        t = time.monotonic()
        try:
            held, what = fn(*args)
        except Exception as exc:  # one attack's missing prerequisite must not hide the others
            held, what = None, f"error: {type(exc).__name__}: {exc}"
        verdict = "skipped" if held is None else ("held" if held else "FELL")
        rows.append(f"| {area} | {attack} | {verdict} | {what} ({time.monotonic() - t:.0f} s) |")
        print(rows[-1], flush=True)

    with tempfile.TemporaryDirectory(prefix="clbench-attacks-") as tmp:
        row("sandbox memory", "bwrap, 8 x 300 MB children, 512 MB limit (cgroup)", sandbox_memory, "bwrap")
        row("sandbox memory", "bwrap, the same, RSS watchdog", sandbox_memory, "bwrap", "rss-watchdog")
        row("sandbox memory", "docker, the same", sandbox_memory, "docker")
        row("sandbox disk", "bwrap /var/tmp fill, 200 MB", var_tmp_fill)
        row("runs", "SIGKILL of `rollout --workers 2`", sigkill_pool, Path(tmp) / "pool", 5 if quick else 30)
        row("runs", "SIGKILL of `rollout --executor ray`", sigkill_ray, Path(tmp) / "ray")
        if not quick:
            row("runs", "two `rollout --resume` at once", concurrent_resumes, Path(tmp) / "pool")
            row("vector envs", "make_vec sync and async, every env", make_vec)
    print("\n| area | attack | verdict | numbers |\n|---|---|---|---|\n" + "\n".join(rows))
    return rows


if __name__ == "__main__":
    from _ratio import run_script

    run_script(main, __doc__)
