"""The run directory's one owner (clbench.run_dir): layout, resume bookkeeping, the writer lock."""
from __future__ import annotations

import json

import numpy as np
import pytest

from clbench import clbench_env_ids
from clbench.results import RESULTS_FILE, append_lines, iter_jsonl
from clbench.run_dir import (STOP_FILE, LocalSink, RunDirectory, RunDirectoryBusy, instance_trajectory,
                             load_checkpoint)

SPECTRUM = max(i for i in clbench_env_ids() if i.startswith("clbench/SpectrumMonitor-"))


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    from clbench.rollout import run
    from clbench.runner import RunConfig

    out = tmp_path_factory.mktemp("run") / "r"
    run(RunConfig(SPECTRUM, "reference", str(out), rollouts=1, workers=1, env_kwargs={"schedule": "short"}),
        say=lambda m: None, quiet=True)
    return RunDirectory(out)


def test_a_run_lands_where_the_run_directory_names_its_files(small_run):
    rd = small_run
    recs = rd.records()
    task = recs[0]["task"]
    stateful = sorted((r for r in recs if r["mode"] == "stateful"), key=lambda r: r["position"])
    stateless = [r for r in recs if r["mode"] == "stateless"]
    assert stateful and stateless and rd.results.is_file()
    resets = [ev for _, ev in iter_jsonl(rd.trajectory(task, "reference", 0)) if ev["event"] == "reset"]
    assert [ev["instance_id"] for ev in resets] == [r["instance_id"] for r in stateful]
    assert load_checkpoint(rd.journal(task, "reference", 0))["position"] >= 0
    first = min(stateless, key=lambda r: r["position"])["instance_id"]  # one stateless job: named after its first
    assert rd.stateless_trajectory(task, "reference", 0, first).is_file()
    events = instance_trajectory(rd.root, task, "reference", "stateless", 0, stateless[-1]["instance_id"])
    assert events[0]["event"] == "reset" and events[0]["instance_id"] == stateless[-1]["instance_id"]
    assert rd.transcript(rd.trajectory(task, "reference", 0)) == rd.root / "transcripts" / task / "reference" / "stateful-r0.jsonl"
    assert {r["env_id"] for r in rd.config()["runs"]} == {SPECTRUM} and task in rd.metadata()["tasks"]
    assert (rd.root / "run_card.json").is_file() and not (rd.root / STOP_FILE).exists()


def _rec(iid: str, pos: int, error=None, mode="stateful", rollout=0) -> dict:
    return {"task": "t", "system": "s", "mode": mode, "rollout": rollout, "instance_id": iid, "position": pos,
            "variant": "v", "reward": 0.5, "error": error}


def test_done_keys_follow_the_newest_record_of_each_instance(tmp_path):
    """Resume skips what the metrics will count: the newest well-formed record of each instance. A record
    whose reward is corrupt is dropped by `load_records`, so its instance is played again, not left a hole."""
    rd = RunDirectory(tmp_path)
    append_lines(rd.results, [_rec("a", 0), _rec("b", 1, error="boom"), _rec("c", 2), _rec("c", 2, error="late"),
                              _rec("b", 1), {"task": "t"}, _rec("x", 0, mode="stateless", rollout=2),
                              {**_rec("d", 3), "reward": "0.5"}])
    with pytest.warns(UserWarning, match="reward '0.5' is not a finite number"):
        ok, bad = rd.done_keys("t", "s")
    assert ok == {("stateful", 0, "a"), ("stateful", 0, "b"), ("stateless", 2, "x")}
    assert bad == {("stateful", 0, "c")}
    assert rd.done_keys("t", "other") == (set(), set())


def _events(iids_positions, shock_before=None) -> list[dict]:
    out = []
    for iid, pos in iids_positions:
        if pos == shock_before:
            out.append({"event": "shock", "kind": "flush"})
        out += [{"event": "reset", "instance_id": iid, "position": pos}, {"event": "step", "step": 1}]
    return out


def test_a_continued_rollout_keeps_instances_up_to_its_checkpoint_and_a_restarted_one_starts_clean(tmp_path):
    rd = RunDirectory(tmp_path)
    traj = rd.trajectory("t", "s", 0)
    append_lines(traj, _events([("a", 0), ("b", 1), ("c", 2)], shock_before=2) + [{"event": "shock", "kind": "x"}])
    rd.continue_rollout("t", "s", 0, last=1)
    kept = [ev for _, ev in iter_jsonl(traj)]
    assert kept == _events([("a", 0), ("b", 1)])  # c, its shock and the dangling shock are gone
    journal = rd.journal("t", "s", 0)
    append_lines(journal, [{"position": 1, "state": {}}])
    append_lines(journal.with_suffix(".json"), [{"position": 0, "state": {}}])
    append_lines(rd.transcript(traj), [{"instance_id": "a"}])
    rd.restart_rollout("t", "s", 0)
    assert not traj.exists() and not journal.exists() and not journal.with_suffix(".json").exists()
    assert not rd.transcript(traj).exists() and rd.checkpoint("t", "s", 0) is None


def test_unrecorded_stateless_instances_leave_their_job_files(tmp_path):
    rd = RunDirectory(tmp_path)
    path = rd.stateless_trajectory("t", "s", 0, "a")
    append_lines(path, _events([("a", 0), ("b", 1), ("c", 2)]))
    rd.drop_unrecorded_stateless("t", "s", 0, ["b", "c"], ok={("stateless", 0, "a")})
    assert [ev.get("instance_id") for _, ev in iter_jsonl(path)] == ["a", None]
    rd.drop_unrecorded_stateless("t", "s", 0, ["a"], ok=set())
    assert not path.exists()  # nothing recorded: no empty file left


def test_one_writer_at_a_time_and_a_stop_flag_does_not_outlive_its_run(tmp_path):
    rd = RunDirectory(tmp_path / "run")
    with rd.writer():
        rd.request_stop("too many errors")
        assert (rd.root / STOP_FILE).exists()
        with pytest.raises(RunDirectoryBusy, match=f"pid {__import__('os').getpid()}"):
            with RunDirectory(rd.root).writer():
                pass
    assert not (rd.root / STOP_FILE).exists()
    (rd.root / STOP_FILE).write_text("left by a killed run\n")
    with RunDirectory(rd.root).writer():  # free again once the holder is gone; the old flag is cleared
        assert not (rd.root / STOP_FILE).exists()


def test_a_torn_line_is_ended_before_the_next_append_in_every_file(tmp_path):
    rel = "trajectories/t/s/stateful-r0.jsonl"
    (tmp_path / "trajectories/t/s").mkdir(parents=True)
    (tmp_path / rel).write_bytes(b'{"event":"reset","instance_id":"a"}\n{"event":"st')  # a killed writer
    (tmp_path / RESULTS_FILE).write_bytes(b'{"task":"t","sys')
    sink = LocalSink(tmp_path)
    for _ in range(2):
        sink.append(rel, [{"event": "step", "reward": np.float64(1.0)}])
        sink.append(RESULTS_FILE, [{"task": "t"}])
    sink.close()
    assert (tmp_path / rel).read_bytes().split(b"\n")[1:] == [b'{"event":"st', b'{"event":"step","reward":1.0}',
                                                               b'{"event":"step","reward":1.0}', b""]
    assert (tmp_path / RESULTS_FILE).read_bytes() == b'{"task":"t","sys\n{"task":"t"}\n{"task":"t"}\n'
    with pytest.warns(UserWarning, match="corrupt line"):
        assert [json.dumps(ev) for _, ev in iter_jsonl(tmp_path / RESULTS_FILE)] == ['{"task": "t"}'] * 2


def test_records_a_run_played_are_the_files_unless_one_is_malformed_or_repeated(small_run):
    """RunDirectory.records(played): a fresh run's own records stand for results.jsonl (no second
    parse) only when reading the file back would give the same; else the file is read."""
    on_disk = small_run.records()
    played = [dict(r) for r in on_disk]
    assert small_run.records(played) == on_disk
    bad = [dict(played[0], reward=float("nan")), *played[1:]]  # the file would drop it
    assert small_run.records(bad) == on_disk
    assert small_run.records(played + [dict(played[0])]) == on_disk  # a key twice: the file decides


@pytest.mark.parametrize("change", [
    {}, {"reward": float("nan")}, {"reward": float("inf")}, {"reward": True}, {"reward": "1"}, {"reward": 3},
    {"reward": 1e308}, {"mode": "both"}, {"rollout": True}, {"rollout": -1}, {"rollout": 1.0}, {"position": [0]},
    {"task": ""}, {"system": 3}, {"instance_id": None}])
def test_records_checked_together_agree_with_malformed(change):
    """results.all_well_formed (a field at a time over all records) is `not any(malformed(r))`."""
    import numpy as np

    from clbench.results import all_well_formed, malformed

    base = {"task": "t", "system": "s", "mode": "stateful", "rollout": 0, "position": 0, "instance_id": "a",
            "reward": 0.5}
    recs = [dict(base, position=i, reward=np.float64(0.25) if i == 2 else 1e308) for i in range(4)]
    recs[1].update(change)
    assert all_well_formed(recs) == (not any(malformed(r) for r in recs))
    assert all_well_formed([]) and all_well_formed(recs[:1]) == (malformed(recs[0]) is None)


def test_a_fast_rollout_checkpoints_its_first_instance_then_at_most_every_checkpoint_seconds(tmp_path, monkeypatch):
    """Checkpoints of a fast scripted rollout are spaced by CHECKPOINT_SECONDS (each one flushes the
    records it covers); with no spacing every instance the share budget allows is saved."""
    import clbench.runner as runner
    from clbench.rollout import run
    from clbench.runner import RunConfig

    def checkpoints(out):
        run(RunConfig(SPECTRUM, "reference", str(out), rollouts=1, mode="stateful", workers=1,
                      env_kwargs={"schedule": "short"}), say=lambda m: None, quiet=True)
        rd = RunDirectory(out)
        task = rd.records()[0]["task"]
        return [json.loads(line)["position"] for line in rd.journal(task, "reference", 0).read_text().splitlines()]

    monkeypatch.setattr(runner, "CHECKPOINT_SECONDS", 3600.0)
    assert checkpoints(tmp_path / "spaced") == [0]
    monkeypatch.setattr(runner, "CHECKPOINT_SECONDS", 0.0)
    monkeypatch.setattr(runner, "CHECKPOINT_SHARE", 1e9)
    assert len(checkpoints(tmp_path / "every")) == 8


def test_lines_hold_the_values_the_stdlib_encoder_writes():
    """encode_lines (orjson) reads back to the values of the stdlib's `dumps`, line for line; a line
    orjson cannot write as plain ASCII, or refuses, is the stdlib's own bytes; an unencodable value
    fails as the stdlib's does."""
    from clbench.results import dumps, encode_lines

    objs = [{"event": "step", "observation": "Pot: 15.\nTo call: 5.", "reward": -67.5, "wall_time": 4.1e-05,
             "big": 1e22, "tiny": 2.5e-07, "nan": float("nan"), "inf": [float("-inf")], "np": np.float32(0.1),
             "arr": np.arange(3), "int": np.int64(7), "nested": {"b": 1, "a": [True, None]}},
            {"text": "café ☕"}, {1: "a non-string key"}, {"huge": 1 << 70}]
    lines = encode_lines(objs).split(b"\n")
    assert lines[-1] == b"" and len(lines) == len(objs) + 1
    for obj, line in zip(objs, lines):
        assert json.loads(line) == json.loads(dumps(obj)), obj
        assert line.isascii()
    for obj, line in zip(objs[1:], lines[1:]):  # the stdlib writes these
        assert line == dumps(obj).encode()
    assert lines[0].index(b'"arr"') < lines[0].index(b'"big"') < lines[0].index(b'"event"')  # keys sorted
    with pytest.raises(TypeError):
        encode_lines([{"x": object()}])


def test_job_lines_are_encode_lines_and_a_card_validates_as_it_reads_back():
    """encode_into (a job's buffer) gives encode_lines' bytes, one object after another; json_values is what
    json.loads(json.dumps(obj, default=float)) gives (the run card is validated as it reads back);
    pretty writes strings and floats as the C encoder does."""
    import math
    from collections import OrderedDict

    from clbench.results import encode_into, encode_lines, pretty
    from clbench.runcard import json_values

    objs = [{"event": "step", "observation": "a\nb", "reward": -0.0, "nan": float("nan")}, {"text": "café"},
            {1: "a non-string key"}, {"huge": 1 << 70}]
    out = bytearray(b"held\n")
    for obj in objs:
        encode_into(out, [obj])
    assert out == b"held\n" + encode_lines(objs) == b"held\n" + b"".join(encode_lines([o]) for o in objs)

    def same(a, b):
        if type(a) is not type(b):
            return False
        if type(a) is float:
            return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
        if type(a) is dict:
            return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
        if type(a) is list:
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b

    card = {"a": (1, 2.5, None, "é"), "b": [np.float64(1.5), np.int64(2), np.float32(0.1)], "c": OrderedDict(x=1),
            "d": {1: 2, "1": 3}, "e": [float("nan"), -0.0, float("inf")], "f": [[1], (2,)], "g": {"h": [1.0, 2]},
            "i": True, "j": 10 ** 40}
    assert same(json_values(card), json.loads(json.dumps(card, default=float)))
    leaves = ["é\u2028", 0.1, -0.0, 1e22, 2.5e-07, float("nan"), float("-inf"), 7, None, True]
    assert [pretty(v) for v in leaves] == ['"\\u00e9\\u2028"', "0.1", "-0.0", "1e+22", "2.5e-07", "null", "null", "7",
                                           "null", "true"]
