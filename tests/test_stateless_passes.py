"""Stateless passes: one per rollout seed for a stochastic agent, one for a deterministic agent,
one per rollout seed for any agent on an env that deals each rollout its own instances (Poker),
`--stateless-passes N` to choose; seeds drawn like the stateful rollouts'; the run card says which."""
from __future__ import annotations

import json

from clbench.cli import main
from clbench.commands.suite import resolve_tasks
from clbench.results import RESULTS_FILE, load_records, read_json
from clbench.run_dir import instance_trajectory
from clbench.runner import RunConfig, cached_env, plan_jobs

[POKER, SPECTRUM] = resolve_tasks(["Poker", "SpectrumMonitor"])
DEALS_REASON = "the env deals each rollout seed its own instances (seed % 5): one pass per rollout seed"


def rollout(out, agent: str, *extra: str, env: str = POKER) -> list[dict]:
    assert main(["rollout", "--env", env, "--agent", agent, "--rollouts", "2", "--env-arg", "schedule=short",
                 "--workers", "1", "--quiet", "--out", str(out), *extra]) == 0
    return load_records(out)


def by_pass(records: list[dict]) -> dict[int, dict[str, dict]]:
    out: dict[int, dict[str, dict]] = {}
    for r in records:
        if r["mode"] == "stateless":
            out.setdefault(r["rollout"], {})[r["instance_id"]] = r
    return out


def test_stochastic_agent_plays_one_pass_per_rollout_seed(tmp_path, capsys):
    out = tmp_path / "random"
    records = rollout(out, "random", "--seed", "7")
    passes = by_pass(records)
    ids = {r["instance_id"] for r in records if r["mode"] == "stateful" and r["rollout"] == 0}
    assert sorted(passes) == [0, 1] and all(set(p) == ids for p in passes.values())
    # pass k is seeded like stateful rollout k
    assert {(r["rollout"], r["seed"]) for r in records} == {(0, 7), (1, 8)}
    # the two passes are different random draws, and so are the instances within one pass
    assert any(passes[0][i]["reward"] != passes[1][i]["reward"] for i in ids)
    first = set()
    for iid in ids:
        steps = [e for e in instance_trajectory(out, "poker", "random", "stateless", 0, iid) if e["event"] == "step"]
        first.add(steps[0]["action"])
    assert len(first) > 1
    card = read_json(out / "run_card.json")["tasks"]["poker/random"]
    assert card["stateless_passes"] == 2
    assert card["stateless_plan"] == {"passes": 2, "reason": DEALS_REASON}
    spectrum = by_pass(rollout(tmp_path / "sm", "random", env=SPECTRUM))
    assert sorted(spectrum) == [0, 1]
    assert read_json(tmp_path / "sm" / "run_card.json")["tasks"]["spectrummonitor/random"]["stateless_plan"] == {
        "passes": 2, "reason": "stochastic agent: one pass per rollout seed"}


def test_deterministic_agent_keeps_one_pass_unless_asked(tmp_path):
    one = rollout(tmp_path / "ref", "reference", env=SPECTRUM)
    assert sorted(by_pass(one)) == [0]
    card = read_json(tmp_path / "ref" / "run_card.json")["tasks"]["spectrummonitor/reference"]
    assert card["stateless_plan"] == {"passes": 1, "reason": "deterministic agent: one pass"}
    three = rollout(tmp_path / "ref3", "reference", "--stateless-passes", "3", env=SPECTRUM)
    passes = by_pass(three)
    assert sorted(passes) == [0, 1, 2]
    # deterministic indeed: every pass scores every instance alike
    assert all(passes[p][i]["reward"] == passes[0][i]["reward"] for p in passes for i in passes[0])
    card = read_json(tmp_path / "ref3" / "run_card.json")["tasks"]["spectrummonitor/reference"]
    assert card["stateless_plan"] == {"passes": 3, "reason": "set with --stateless-passes"}
    assert json.loads((tmp_path / "ref3" / "config.json").read_text())["runs"][0]["stateless_passes"] == 3


def test_a_deterministic_agent_plays_one_pass_per_rollout_seed_where_each_rollout_has_its_own_deal(tmp_path):
    """Poker deals rollout seed s its deal s % 5: pass k plays rollout k's cards, so the deterministic
    reference gets a pass per rollout seed (one pass would compare every rollout with deal 0)."""
    records = rollout(tmp_path / "ref", "reference")
    passes = by_pass(records)
    assert sorted(passes) == [0, 1]
    assert {(r["rollout"], r["seed"]) for r in records if r["mode"] == "stateless"} == {(0, 0), (1, 1)}
    assert any(passes[0][i]["reward"] != passes[1][i]["reward"] for i in passes[0])  # other cards
    card = read_json(tmp_path / "ref" / "run_card.json")["tasks"]["poker/reference"]
    assert card["stateless_plan"] == {"passes": 2, "reason": DEALS_REASON}


def test_resume_replays_only_the_missing_instances_of_a_pass(tmp_path):
    out = tmp_path / "random"
    rollout(out, "random")
    lines = (out / RESULTS_FILE).read_text().splitlines()
    dropped = [json.loads(x) for x in lines if json.loads(x)["mode"] == "stateless" and json.loads(x)["rollout"] == 1][-1]
    (out / RESULTS_FILE).write_text("\n".join(x for x in lines if json.loads(x) != dropped) + "\n")
    cfg = RunConfig(env_id=POKER, agent="random", out=str(out), rollouts=2, env_kwargs={"schedule": "short"})
    base = cached_env(POKER, cfg.env_kwargs).unwrapped
    jobs = plan_jobs(cfg, base.task, base.schedule, resumable=True, resume=True)
    assert [(j.mode, j.rollout, j.instance_ids) for j in jobs] == [("stateless", 1, [dropped["instance_id"]])]
    # its trajectory is dropped with its record (the pass's other instances keep theirs) ...
    iid, ids = dropped["instance_id"], {r["instance_id"] for r in load_records(out) if r["mode"] == "stateless"}
    assert instance_trajectory(out, "poker", "random", "stateless", 1, iid) == []
    assert all(instance_trajectory(out, "poker", "random", "stateless", 1, i) for i in ids - {iid})
    # ... and the resumed run writes it once more, so every instance's steps are there exactly once
    assert main(["rollout", "--resume", str(out), "--quiet"]) == 0
    resets = [e["instance_id"] for path in (out / "trajectories/poker/random").glob("stateless-r1-*.jsonl")
              for e in map(json.loads, path.read_text().splitlines()) if e["event"] == "reset"]
    assert sorted(resets) == sorted(ids)


def test_format_1_run_directories_keep_their_per_instance_stateless_trajectories(tmp_path):
    from clbench.run_dir import legacy_stateless_trajectory

    path = legacy_stateless_trajectory(tmp_path, "poker", "random", 1, "h/7")
    path.parent.mkdir(parents=True)
    events = [{"event": "reset", "instance_id": "h/7", "position": 7, "observation": "o"},
              {"event": "step", "step": 1, "action": "call", "reward": 1.0}]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert instance_trajectory(tmp_path, "poker", "random", "stateless", 1, "h/7") == events
