"""Runs that cannot double-write or mislead (issue 31), on real `clbench` processes.

Before: a SIGKILLed `clbench rollout --workers 2` left its pool workers playing and appending; two
`--resume`s of one directory both wrote; `clbench report` published a headline over a corrupted or
incomplete rollout; a shock past the schedule's end and a dead Ray address were accepted.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clbench.registry import clbench_env_ids

PY = sys.executable


def env_id(task: str) -> str:
    return max(i for i in clbench_env_ids() if i.startswith(f"clbench/{task}-v"))


def clbench(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "clbench", *args], capture_output=True, text=True, timeout=600, **kw)


def _children(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(b")", 1)[1].split()[1]) == pid:
                kids.append(int(entry))
    return kids


def _running(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def _lines(path: Path) -> int:
    return len(path.read_bytes().splitlines()) if path.exists() else 0


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        kids = _children(todo.pop())
        found.update(kids)
        todo += kids
    return found


def _start_killed_run(out: Path) -> list[int]:
    """A 2-worker run SIGKILLed while its workers play; returns the workers' pids."""
    proc = subprocess.Popen([PY, "-m", "clbench", "rollout", "--env", env_id("SpectrumMonitor"), "--agent",
                             "reference", "--rollouts", "10", "--workers", "2", "--quiet", "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while _lines(out / "results.jsonl") < 20:
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        time.sleep(0.1)
    workers = _children(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return workers


def test_workers_die_with_a_sigkilled_run_and_one_resume_writes_at_a_time(tmp_path):
    out = tmp_path / "run"
    workers = _start_killed_run(out)
    assert len(workers) >= 2  # the pool (and its resource tracker)
    deadline = time.monotonic() + 3  # each must be gone within 3 s of its parent's death
    while [w for w in workers if _running(w)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [w for w in workers if _running(w)] == []
    written = _lines(out / "results.jsonl")
    time.sleep(2)
    assert _lines(out / "results.jsonl") == written  # nobody appends any more

    # two resumes at once: exactly one writes; the other says so in one line and exits 1
    first = subprocess.Popen([PY, "-m", "clbench", "rollout", "--resume", str(out), "--quiet", "--workers", "2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = out / ".writer.lock"  # the second starts once the first holds the directory
    deadline = time.monotonic() + 60
    while f"pid {first.pid}" not in (lock.read_text() if lock.exists() else ""):
        assert first.poll() is None and time.monotonic() < deadline, "the first resume never took the lock"
        time.sleep(0.05)
    second = clbench("rollout", "--resume", str(out), "--quiet")
    assert second.returncode == 1 and "is being written by another clbench process (pid" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1, second.stderr
    _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-2000:]
    keys = [(r["mode"], r["rollout"], r["instance_id"])
            for r in map(json.loads, (out / "results.jsonl").read_text().splitlines()) if r.get("error") is None]
    # a resumed stateful rollout replays from its last checkpoint, so a key may hold the record of
    # the killed run and the replay's (the later wins); a second writer would have added a third
    from collections import Counter

    assert max(Counter(keys).values()) <= 2
    assert len(set(keys)) == 10 * 90 + 90  # every planned record: 10 stateful rollouts, one stateless pass
    assert clbench("report", str(out), "--no-plots").returncode == 0


def test_a_sigkilled_ray_driver_leaves_no_ray_process(tmp_path):
    """Before: Ray's workers and node agents outlived a SIGKILLed `--executor ray` driver."""
    pytest.importorskip("ray")
    out = tmp_path / "run"
    proc = subprocess.Popen([PY, "-m", "clbench", "rollout", "--env", env_id("SpectrumMonitor"), "--agent",
                             "reference", "--rollouts", "10", "--workers", "2", "--executor", "ray", "--quiet",
                             "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    ray = set()
    while _lines(out / "results.jsonl") < 20:  # records arrive once the Ray workers play
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        ray |= _descendants(proc.pid)
        time.sleep(0.1)
    ray |= _descendants(proc.pid)
    names = {Path(f"/proc/{p}/cmdline").read_bytes()[:200] for p in ray if _running(p)}
    assert any(b"raylet" in n for n in names) and any(n.startswith(b"ray::") for n in names), names
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 20  # Ray's own agents took minutes
    while [p for p in ray if _running(p)]:
        assert time.monotonic() < deadline, {p: Path(f"/proc/{p}/cmdline").read_bytes()[:60] for p in ray
                                             if _running(p)}
        time.sleep(0.2)
    written = _lines(out / "results.jsonl")
    time.sleep(1)
    assert _lines(out / "results.jsonl") == written
    # the driver wrote what the workers streamed, checkpoints after their records: a resume completes it
    resumed = clbench("rollout", "--resume", str(out), "--quiet")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    from collections import Counter

    keys = Counter((r["mode"], r["rollout"], r["instance_id"])
                   for r in map(json.loads, (out / "results.jsonl").read_text().splitlines()) if r.get("error") is None)
    assert len(keys) == 10 * 90 + 90 and max(keys.values()) <= 2


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("small") / "run"
    done = clbench("rollout", "--env", env_id("Poker"), "--env-arg", "schedule=short", "--agent", "reference",
                   "--rollouts", "2", "--workers", "1", "--quiet", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def _copy(run: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(run, dest)
    return dest


def test_a_corrupt_record_is_refused_with_its_file_and_line(small_run, tmp_path):
    run = _copy(small_run, tmp_path / "run")
    lines = (run / "results.jsonl").read_text().splitlines()
    rec = json.loads(lines[4])
    rec["reward"] = "abc"
    lines[4] = json.dumps(rec)
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    refused = clbench("report", str(run), "--no-plots")
    assert refused.returncode == 1
    assert "results.jsonl:5: record dropped: reward 'abc' is not a finite number" in refused.stderr
    assert "stateful rollout 0 has 11 of 12 instances" in refused.stderr or \
        "stateful rollout 1 has 11 of 12 instances" in refused.stderr
    marked = clbench("report", str(run), "--no-plots", "--allow-incomplete")
    assert marked.returncode == 0 and marked.stdout.startswith("INCOMPLETE RESULTS (2 problem(s))"), marked.stdout[:300]
    as_json = json.loads(clbench("report", str(run), "--format", "json", "--allow-incomplete", "--no-plots").stdout)
    assert len(as_json["problems"]) == 2


def test_a_missing_rollout_and_a_torn_line_are_refused(small_run, tmp_path):
    run = _copy(small_run, tmp_path / "run")
    lines = [line for line in (run / "results.jsonl").read_text().splitlines()
             if (json.loads(line)["mode"], json.loads(line)["rollout"]) != ("stateful", 1)]
    (run / "results.jsonl").write_text("\n".join(lines) + '\n{"task": "poker", "sys')
    refused = clbench("report", str(run), "--no-plots")
    assert refused.returncode == 1
    assert "stateful rollout(s) [1] have no record" in refused.stderr and "torn last line" in refused.stderr
    html = clbench("report", str(run), "--format", "html", "--allow-incomplete", "--no-plots")
    assert html.returncode == 0
    page = Path(html.stdout.strip()).read_text()
    assert page.index("INCOMPLETE RESULTS") < page.index("normalized gain")
    assert clbench("report", str(small_run), "--no-plots").returncode == 0  # the intact run reports


def test_a_shock_past_the_schedule_and_a_dead_ray_address_fail_up_front(tmp_path):
    # five rollouts: Poker deals each rollout seed one of five deals (fewer would add a warning line)
    late = clbench("rollout", "--env", env_id("Poker"), "--env-arg", "schedule=short", "--agent", "reference",
                   "--rollouts", "5", "--shock", "flush@99999", "--out", str(tmp_path / "a"))
    assert late.returncode == 1
    assert late.stderr.strip().splitlines() == [late.stderr.strip()]  # one line
    assert "position 99999 is outside" in late.stderr and "(positions 0 to 11)" in late.stderr
    assert not (tmp_path / "a" / "results.jsonl").exists()
    started = time.monotonic()
    dead = clbench("rollout", "--env", env_id("Poker"), "--env-arg", "schedule=short", "--agent", "reference",
                   "--rollouts", "5", "--executor", "ray", "--ray-address", "127.0.0.1:1", "--out", str(tmp_path / "b"))
    assert dead.returncode == 1 and time.monotonic() - started < 30
    assert "no Ray cluster answers at 127.0.0.1:1" in dead.stderr and len(dead.stderr.strip().splitlines()) == 1


def test_a_ray_job_streams_its_writes_in_order_then_its_records(tmp_path, monkeypatch):
    """A Ray job is a generator: its writes leave in batches, in the order made (no round trip per
    write), the driver writes them, and the run directory matches the local pool's byte for byte."""
    import gymnasium as gym

    from clbench import executors
    from clbench.run_dir import LocalSink
    from clbench.runner import RunConfig, plan_jobs, run_job

    def jobs(out):
        cfg = RunConfig(env_id("Poker"), "reference", str(out), rollouts=1, mode="stateful",
                        env_kwargs={"schedule": "short"})
        env = gym.make(cfg.env_id, **cfg.env_kwargs)
        return plan_jobs(cfg, env.unwrapped.task, env.unwrapped.schedule, resumable=env.unwrapped.resumable)

    monkeypatch.setattr(executors, "FLUSH_SECONDS", 0.001)  # many small batches

    class Handshake(executors._ListSink):
        """The first writes wait until the generator has sent them, so the job streams several
        batches however the threads are scheduled (a busy machine could otherwise finish first)."""
        waits = 3

        def write(self, rel, data):  # JobFiles hands over encoded lines (append encodes, then writes)
            super().write(rel, data)
            if self.waits:
                self.waits -= 1
                deadline = time.monotonic() + 10
                while self.ops and time.monotonic() < deadline:
                    time.sleep(0.001)

    monkeypatch.setattr(executors, "_ListSink", Handshake)
    local_job, = jobs(tmp_path / "local")
    run_job(local_job)
    streamed_job, = jobs(tmp_path / "ray")
    items = list(executors._ray_job(streamed_job))
    kinds = [kind for kind, _ in items]
    assert kinds[-1] == "done" and set(kinds[:-1]) == {"ops"} and len(kinds) > 2, kinds
    sink = LocalSink(tmp_path / "ray")
    for _, ops in items[:-1]:
        executors._write(sink, ops)
    sink.close()
    for path in (tmp_path / "local").rglob("*.jsonl"):
        if "state" in path.parts:  # checkpoints are taken on a time budget (runner.CHECKPOINT_SHARE)
            continue
        twin = tmp_path / "ray" / path.relative_to(tmp_path / "local")
        strip = lambda b: [json.dumps({k: v for k, v in json.loads(l).items() if k != "wall_time"}, sort_keys=True)
                           for l in b.splitlines()]
        assert strip(twin.read_bytes()) == strip(path.read_bytes()), path

    # a job that fails midway still delivers what it wrote before, then raises
    def failing(job, sink):
        sink.append("results.jsonl", [{"n": 1}])
        sink.checkpoint("state/x.jsonl", b"{}\n")
        raise RuntimeError("boom")

    monkeypatch.setattr(executors, "run_job", failing)
    monkeypatch.setattr(executors, "FLUSH_SECONDS", 30.0)  # one batch: the job ends long before
    gen = executors._ray_job(streamed_job)
    assert next(gen) == ("ops", [("results.jsonl", b'{"n":1}\n', None), ("state/x.jsonl", None, b"{}\n")])
    with pytest.raises(RuntimeError, match="boom"):
        next(gen)
