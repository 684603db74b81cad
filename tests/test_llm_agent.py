"""The LLM agent with every memory system, through a real local chat-completions server.

The server (tests/openai_server.py) plays each env's scripted reference agent from the prompt
alone, so what a memory carries into the prompt decides how it plays: with no memory it plays
like the stateless reference, with full in-context memory like the stateful one. Every memory
system completes a stateful and a stateless rollout on SpectrumMonitor-v6 ("short" schedule)
and DBExplore-v3 (small scale; two systems here, all of them in the slow test) through the
runner, with token counts and cost (a test price for the scripted model) in the run card.
Faults injected through the same server (429, 500, a hang, malformed tool-call JSON, an empty
reply, a call that keeps failing, a memory update that does not validate) never stop a run.
"""
from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

from clbench.agent import make_agent
from clbench.agents.llm import MEMORY_SYSTEMS
from clbench.cli import main as cli_main
from clbench.results import load_records
from clbench.error_policy import ErrorPolicy
from clbench.rollout import RunIncomplete, run
from clbench.runner import RunConfig
from tests.openai_server import Fault, ReferencePolicy, ScriptedServer

SPECTRUM, DBEXPLORE = "clbench/SpectrumMonitor-v6", "clbench/DBExplore-v3"
SHORT = {"schedule": "short"}
PRICE = {"input": 2.0, "cached_input": 0.5, "output": 8.0}
# small windows so that the bounded harnesses drop or fold within the 8 short scans
MEMORY_ARGS = {"truncation": {"window_tokens": 700}, "sliding-summary": {"window_tokens": 700}}
#: text each memory puts into the prompt of a later instance (never in a stateless prompt)
MARKERS = {
    "icl": "Outcome of scan-007", "truncation": "Outcome of scan-007", "notepad": "Your notes from earlier instances",
    "retrieval": "Memories recalled for this instance", "playbook": "Playbook (curated from earlier instances)",
    "acc": "Your cognitive state", "sliding-summary": "Summary of earlier instances",
    "memory-bank": "Your memory banks", "file-state": "Your memory files",
}
SYSTEMS = [*MEMORY_SYSTEMS, "retrieval+embeddings"]


@pytest.fixture(scope="module")
def prices(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("prices") / "prices.yaml"
    path.write_text(json.dumps({"models": {"scripted": PRICE, "embedder": PRICE}}))  # JSON is YAML
    return str(path)


def agent_kwargs(server, memory: str, prices: str | None, **extra) -> dict:
    name, _, variant = memory.partition("+")
    args = dict(MEMORY_ARGS.get(name, {}), **({"embedding_model": "embedder"} if variant == "embeddings" else {}))
    return {"memory": name, "model": "scripted", "base_url": server.base_url, "backoff": 0.01, "prices": prices,
            "memory_args": args, **extra}


def rollout(server, out: Path, memory: str, prices: str | None, env_id=SPECTRUM, env_kwargs=SHORT,
            mode="both", resume=False, policy=None, **extra) -> tuple[dict, list[dict]]:
    cfg = RunConfig(env_id=env_id, agent="llm", system="llm", out=str(out), rollouts=1, mode=mode, workers=1,
                    env_kwargs=dict(env_kwargs), agent_kwargs=agent_kwargs(server, memory, prices, **extra))
    try:
        card = run(cfg, say=lambda msg: None, resume=resume, policy=policy)
    except RunIncomplete as exc:
        if policy is None:
            raise
        card = exc.card
    records = sorted(load_records(out), key=lambda r: (r["mode"], r["position"]))
    return card, records


def rewards(records: list[dict], mode: str) -> dict[str, float]:
    return {r["instance_id"]: r["reward"] for r in records if r["mode"] == mode}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("reference")
    run(RunConfig(env_id=SPECTRUM, agent="reference", out=str(out), rollouts=1, workers=1, env_kwargs=SHORT),
        say=lambda msg: None)
    return load_records(out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, prices) -> dict:
    """A stateful and a stateless rollout per memory system (native tool calls), as one run."""
    results = {}
    for memory in SYSTEMS:
        out = tmp_path_factory.mktemp(memory)
        with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT), reasoning_tokens=2) as server:
            rollout(server, out, memory, prices, mode="stateful")
            n_stateful = len(server.requests)
            rollout(server, out, memory, prices, mode="stateless")
            card, records = rollout(server, out, memory, prices, resume=True)  # nothing left: the run card
            assert not server.policy_errors
        requests = [json.dumps(b) for b in server.requests]
        results[memory] = {"card": card, "records": records, "stateful": requests[:n_stateful],
                           "stateless": requests[n_stateful:], "embeddings": len(server.embedding_requests)}
    return results


@pytest.mark.parametrize("memory", SYSTEMS)
def test_every_memory_completes_both_modes_with_tokens_and_cost(runs, reference, memory):
    res = runs[memory]
    records = res["records"]
    assert [r["mode"] for r in records] == ["stateful"] * 8 + ["stateless"] * 8
    assert all(r["error"] is None for r in records)
    usage = res["card"]["tasks"]["spectrummonitor/llm"]["usage"]
    tok, n_chat = usage["tokens"], len(res["stateful"]) + len(res["stateless"])
    assert tok["prompt"] > 0 and tok["completion"] > 0 and tok["cached"] > 0
    assert tok["reasoning"] == 2 * n_chat and tok["calls"] == n_chat + res["embeddings"]
    expected = sum(((r["tokens"]["prompt"] - r["tokens"]["cached"]) * PRICE["input"] + r["tokens"]["cached"]
                    * PRICE["cached_input"] + r["tokens"]["completion"] * PRICE["output"]) / 1e6 for r in records)
    assert usage["cost"] > 0 and usage["cost"] == pytest.approx(expected)
    for r in records:  # one action per scan: the context the model saw is the whole prompt
        assert r["steps"] == 1 and r["tokens"]["context_first"] == r["tokens"]["context_max"] > 0
        assert r["tokens"]["context_first"] <= r["tokens"]["prompt"]
    # a stateless agent never updates its memory, and the scripted model then plays exactly like
    # the stateless reference
    assert all(r["tokens"]["memory_calls"] == 0 for r in records if r["mode"] == "stateless")
    assert rewards(records, "stateless") == rewards(reference, "stateless")
    assert all('"tools": [' in q for q in res["stateful"] + res["stateless"] if "Memory task" not in q)
    learns_by_model = memory not in ("none", "icl", "truncation")
    assert (sum(r["tokens"]["memory_calls"] for r in records) > 0) == learns_by_model


@pytest.mark.parametrize("memory", [m for m in SYSTEMS if m != "none"])
def test_memory_reaches_later_prompts_only_when_stateful(runs, memory):
    res = runs[memory]
    marker = MARKERS[memory.partition("+")[0]]
    assert any(marker in q for q in res["stateful"])
    assert not any(marker in q for q in res["stateless"])
    if memory == "file-state":  # the model read a file back with the memory tool
        assert any('"role": "tool", "tool_call_id": "call_' in q and '"content": "Outcome of scan-' in q
                   for q in res["stateful"])
    if memory == "retrieval+embeddings":
        assert res["embeddings"] > 0


def test_icl_replays_the_stateful_reference_and_none_does_not(runs, reference):
    assert rewards(runs["icl"]["records"], "stateful") == rewards(reference, "stateful")
    assert rewards(runs["none"]["records"], "stateful") == rewards(reference, "stateless")
    # the two replays are told apart: on SpectrumMonitor-v6's 8-scan `short` schedule the stateful
    # reference's memory pays (v4's did not: -0.31 in sum over the scans)
    assert sum(rewards(reference, "stateful").values()) > sum(rewards(reference, "stateless").values())


def test_prompt_footprint_grows_with_icl_and_stays_flat_when_bounded(runs):
    def series(memory):
        return [r["tokens"]["context_first"] for r in runs[memory]["records"] if r["mode"] == "stateful"]

    icl = series("icl")
    assert all(b > a for a, b in zip(icl, icl[1:])) and icl[-1] > 3 * icl[0]
    for memory in ("truncation", "sliding-summary"):
        s = series(memory)
        assert max(s[3:]) < icl[-1] * 0.6 and max(s[3:]) - min(s[3:]) < 800, (memory, s)
    none = series("none")
    assert max(none) - min(none) < 100


def test_text_grammar_when_the_endpoint_has_no_tools(tmp_path, prices, reference):
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT), supports_tools=False) as server:
        _, records = rollout(server, tmp_path, "icl", prices, mode="stateful")
        with_tools = [b for b in server.requests if b.get("tools")]
    assert len(with_tools) == 1  # refused once, then text for the rest of the rollout
    assert rewards(records, "stateful") == rewards(reference, "stateful")
    traj = (tmp_path / "trajectories/spectrummonitor/llm/stateful-r0.jsonl").read_text()
    assert '"action":"{\\"transmitters\\"' in traj


def test_faults_are_survived_and_recorded(tmp_path, prices, reference):
    faults = [Fault("rate_limit", retry_after="0"), Fault("server_error"), Fault("hang", seconds=1.5),
              Fault("malformed_tool_call"), Fault("empty")] + [Fault("server_error")] * 4
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        server.faults.extend(faults)
        _, records = rollout(server, tmp_path, "icl", prices, mode="stateful", timeout=0.5, max_retries=3,
                             policy=ErrorPolicy(fail_on_error=1))
    first, second, *rest = records
    assert len(records) == 8
    # scan 1: three transport faults retried, then a malformed tool call and an empty reply, each
    # answered by the env as invalid; the second invalid reply ends the scan with 0
    assert first["error"] is None and first["reward"] == 0.0 and first["steps"] == 2
    assert first["tokens"]["retries"] == 3 and first["tokens"]["faults"] == 2
    traj = [json.loads(x) for x in (tmp_path / "trajectories/spectrummonitor/llm/stateful-r0.jsonl").read_text().splitlines()]
    steps = [e for e in traj if e["event"] == "step"][:2]
    assert "not valid JSON" in steps[0]["observation"] and steps[1]["action"] == ""
    # scan 2: the call fails four times (max_retries=3): recorded as an infrastructure error; within
    # --fail-on-error 1 the run goes on
    assert second["reward"] == 0.0 and "HTTP 500" in second["error"] and "4 attempts" in second["error"]
    assert second["error_kind"] == "infrastructure"
    assert all(r["error"] is None and r["steps"] >= 1 and 0.0 <= r["reward"] <= 1.0 for r in rest)
    ref = rewards(reference, "stateless")  # icl's memory still shapes its replies after the faults
    assert [r["reward"] for r in rest] != [ref[r["instance_id"]] for r in rest]


def test_replies_that_are_not_the_models_whole_answer_are_scored_and_said_so(tmp_path, prices):
    """Red team s16: content sent as a list of parts crashed every instance (scored 0 as agent errors, nothing
    said); a refusal and a reply cut off at max_tokens were scored with no fault and the refusal text was lost.
    Now parts are read as their text, refusals and cut-off replies are model faults in the record, and the run
    card and the headline say how many instances stand on faulty replies."""
    from clbench.reporting.tables import headline_table
    from clbench.llm.transcripts import read_transcripts, transcript_file

    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        server.faults.extend([Fault("parts"), Fault("none"), Fault("refusal"), Fault("length")])
        card, records = rollout(server, tmp_path, "none", prices)
    assert all(r["error"] is None for r in records), [r["error"] for r in records]
    faults = [f for r in records for f in r.get("model_faults") or []]
    assert any("the model refused (I'm sorry" in f for f in faults), faults
    assert any("cut off at max_tokens" in f for f in faults), faults
    task = card["tasks"]["spectrummonitor/llm"]
    assert task["errors"]["model_faults"]["instances"] >= 1 and task["errors"]["agent"] == 0
    note = headline_table({"tasks": [task], "metadata": None}).note
    assert "scored on faulty model replies" in note and "the model refused" in note, note
    traj = tmp_path / "trajectories/spectrummonitor/llm/stateful-r0.jsonl"
    replies = [e["reply"] for entries in read_transcripts(transcript_file(tmp_path, traj)).values()
               for e in entries if e.get("reply")]
    assert any(r.get("refusal") == "I'm sorry, I can't assist with that." for r in replies), replies[:3]
    assert any(r["finish_reason"] == "length" for r in replies)


def test_unknown_model_price_gives_null_cost(tmp_path):
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        card, records = rollout(server, tmp_path, "none", None)
    assert card["tasks"]["spectrummonitor/llm"]["usage"]["cost"] is None
    assert card["tasks"]["spectrummonitor/llm"]["usage"]["tokens"]["prompt"] > 0


def test_response_cache_makes_a_rerun_free(tmp_path, prices):
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        cache = str(tmp_path / "cache")
        first, _ = rollout(server, tmp_path / "a", "notepad", prices, cache_dir=cache)
        paid = len(server.requests)
        again, records = rollout(server, tmp_path / "b", "notepad", prices, cache_dir=cache)
    assert len(server.requests) == paid  # nothing sent the second time
    u1, u2 = first["tasks"]["spectrummonitor/llm"]["usage"], again["tasks"]["spectrummonitor/llm"]["usage"]
    assert u1["cost"] > 0 and u2["cost"] == 0.0 and u1["tokens"] == u2["tokens"]
    assert sum(r["tokens"]["cache_hits"] for r in records) == u2["tokens"]["calls"] == u2["cache_hits"]
    assert "cache_hits" not in u1  # the card says which run replayed cached replies
    from clbench.reporting.tables import usage_line

    assert "answered from the response cache" in usage_line(again["tasks"]["spectrummonitor/llm"])


def _play(env, agent, first: tuple | None = None) -> list[str]:
    obs, info = first or env.reset()
    actions = []
    agent.begin_instance(obs, info)
    while True:
        actions.append(agent.act(obs, info))
        obs, reward, term, trunc, info = env.step(actions[-1])
        if term or trunc:
            agent.end_instance(reward, info)
            return actions


@pytest.mark.parametrize("memory", SYSTEMS)
def test_state_dict_resumes_exactly(prices, memory):
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        kw = agent_kwargs(server, memory, prices)
        env, env2 = gym.make(SPECTRUM, **SHORT), gym.make(SPECTRUM, **SHORT)
        a = make_agent("llm", env, seed=0, **kw)
        _play(env, a, env.reset(seed=0))
        for _ in range(3):
            _play(env, a)
        state = json.loads(json.dumps(a.state_dict()))  # JSON-serialisable
        b = make_agent("llm", env2, seed=0, **kw)
        b.load_state_dict(state)
        for pos in range(4, 8):
            acts_a = _play(env, a)
            acts_b = _play(env2, b, env2.reset(seed=0, options={"instance": pos}))
            assert acts_a == acts_b
        assert a.state_dict()["memory_state"] == b.state_dict()["memory_state"]
        assert a.pop_usage().calls > 0 and b.pop_usage().calls > 0
        b.memory_event("partial-reset", fraction=1.0)  # forgetting everything leaves nothing in the prompt
        assert b.memory.history(10**6) == [] and b.memory.tools() == []
        if memory == "acc":
            state = b.memory.state
            assert b.memory.artifacts == [] and state["episodic_trace"] == state["artifact_refs"] == []
        else:
            assert b.memory.context("scan") == ""


def test_acc_rejects_a_state_that_does_not_validate(prices):
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        env = gym.make(SPECTRUM, **SHORT)
        agent = make_agent("llm", env, seed=0, **agent_kwargs(server, "acc", prices))
        # request 1 acts on scan 1; request 2 is the first state update: it gets prose, not a CCS
        server.faults.extend([Fault("none"), Fault("reply", content="I think the band has channels.")])
        _play(env, agent, env.reset(seed=0))
        _play(env, agent)
        assert agent.memory.rejected == 1 and agent.memory.state is None
        assert any("does not validate" in f for f in agent.pop_usage().faults)
        _play(env, agent)
        state = agent.memory.state
        assert state is not None and set(state["artifact_refs"]) <= {"A1", "A2"}
        assert "Your cognitive state" in server.requests[-1]["messages"][0]["content"]


def test_memory_shocks(tmp_path, prices):
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        env = gym.make(SPECTRUM, **SHORT)
        icl = make_agent("llm", env, seed=0, **agent_kwargs(server, "icl", prices))
        _play(env, icl, env.reset(seed=0))
        for _ in range(3):
            _play(env, icl)
        icl.memory_event("partial-reset", fraction=0.5)  # the 4th instance is learned first, then half goes
        assert len(icl.memory.episodes) == 2
        with pytest.raises(NotImplementedError, match="no compaction"):
            icl.memory_event("recompact")
        icl.memory_event("flush")
        assert icl.memory.episodes == [] and icl.state_dict()["pending"] is None
        summary = make_agent("llm", env, seed=0, **agent_kwargs(server, "sliding-summary", prices))
        _play(env, summary, env.reset(seed=0))
        _play(env, summary)
        summary.memory_event("recompact")  # both instances folded into the summary at once
        assert summary.memory.episodes == [] and "Outcome of scan-002" in summary.memory.summary
        # through the runner: a shock before scan 5 of the stateful rollout
        cfg = RunConfig(env_id=SPECTRUM, agent="llm", out=str(tmp_path), rollouts=1, mode="stateful", workers=1,
                        env_kwargs=SHORT, agent_kwargs=agent_kwargs(server, "playbook", prices),
                        shocks=["partial-reset:0.5@4"])
        run(cfg, say=lambda msg: None)
    records = sorted(load_records(tmp_path), key=lambda r: r["position"])
    assert [r.get("shocks") for r in records] == [None] * 4 + [["partial-reset"]] + [None] * 3
    assert all(r["error"] is None for r in records)


def test_cli_rollout_and_agents_listing(tmp_path, prices, capsys):
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        code = cli_main(["rollout", "--env", SPECTRUM, "--agent", "llm", "--memory", "memory-bank", "--model",
                         "scripted", "--base-url", server.base_url, "--env-arg", "schedule=short", "--rollouts", "1",
                         "--workers", "1", "--out", str(tmp_path), "--temperature", "0", "--max-tokens", "512",
                         "--agent-arg", f"prices={prices}", "--agent-arg", "backoff=0.01"])
    preflight, first = server.requests[:2]  # one cheap pre-flight call before any job
    assert preflight["max_tokens"] == 16 and "tools" not in preflight
    assert code == 0 and first["max_tokens"] == 512 and first["temperature"] == 0
    card = json.loads((tmp_path / "run_card.json").read_text())
    # the default system name says which model and memory ran; the settings that shape the result are kept
    assert list(card["tasks"]) == ["spectrummonitor/llm-memory-bank-scripted"]
    assert card["tasks"]["spectrummonitor/llm-memory-bank-scripted"]["usage"]["cost"] > 0
    settings = card["systems"]["llm-memory-bank-scripted"]["settings"]
    assert settings["max_tokens"] == 512 and settings["temperature"] == 0 and settings["context_tokens"] == 32768
    assert settings["token_count"].startswith("estimate") and len(settings["prompt_templates_sha256"]) == 16
    assert settings["price"]["source"].startswith("user file")
    assert "Tokens: prompt" in capsys.readouterr().out
    assert cli_main(["report", str(tmp_path), "--no-plots", "--n-boot", "100"]) == 0  # reports read the tokens
    assert "Cost and tokens" in capsys.readouterr().out
    assert cli_main(["agents"]) == 0
    listing = capsys.readouterr().out
    assert all(f"| {name} |" in listing for name in MEMORY_SYSTEMS)
    assert "| clbench/SpectrumMonitor-v6 | oracle, reference |" in listing


def test_bad_options_fail_clearly():
    env = gym.make(SPECTRUM, **SHORT)
    with pytest.raises(ValueError, match="unknown memory system 'nope'"):
        make_agent("llm", env, memory="nope", model="m", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(TypeError, match="window"):
        make_agent("llm", env, memory="icl", model="m", base_url="http://127.0.0.1:9/v1",
                   memory_args={"window_tokens": 5})
    with pytest.raises(ValueError, match="model name is required"):
        make_agent("llm", env, memory="icl", base_url="http://127.0.0.1:9/v1")


# ---------------------------------------------------------------------- DBExplore-v3
@pytest.fixture(scope="module")
def db_kwargs(tmp_path_factory) -> dict:
    if DBEXPLORE not in gym.registry:
        pytest.skip("DBExplore-v3 is not available")
    return {"scale": 0.02, "cache_dir": str(tmp_path_factory.mktemp("dbexplore-cache"))}


@pytest.fixture(scope="module")
def db_reference(tmp_path_factory, db_kwargs) -> list[dict]:
    out = tmp_path_factory.mktemp("db-reference")
    run(RunConfig(env_id=DBEXPLORE, agent="reference", out=str(out), rollouts=1, workers=1, env_kwargs=db_kwargs),
        say=lambda msg: None)
    return load_records(out)


def _db_rollout(tmp_path, prices, db_kwargs, memory):
    with ScriptedServer(ReferencePolicy(DBEXPLORE, **db_kwargs)) as server:
        card, records = rollout(server, tmp_path / memory, memory, prices, env_id=DBEXPLORE, env_kwargs=db_kwargs)
        assert not server.policy_errors
    assert len(records) == 80 and all(r["error"] is None for r in records)
    usage = card["tasks"]["dbexplore/llm"]["usage"]
    assert usage["tokens"]["prompt"] > 0 and usage["cost"] > 0
    multi = [r["tokens"] for r in records if r["steps"] > 2]  # the transcript grows within a question
    assert multi and all(t["context_max"] > t["context_first"] > 0 for t in multi)
    return records


def test_dbexplore_icl_learns_like_the_stateful_reference(tmp_path, prices, db_kwargs, db_reference):
    records = _db_rollout(tmp_path, prices, db_kwargs, "icl")
    assert rewards(records, "stateful") == rewards(db_reference, "stateful")
    assert rewards(records, "stateless") == rewards(db_reference, "stateless")
    assert sum(rewards(records, "stateful").values()) > sum(rewards(records, "stateless").values()) + 4


@pytest.mark.slow
@pytest.mark.parametrize("memory", [m for m in MEMORY_SYSTEMS if m != "icl"])
def test_dbexplore_every_memory_completes_both_modes(tmp_path, prices, db_kwargs, db_reference, memory):
    records = _db_rollout(tmp_path, prices, db_kwargs, memory)
    assert rewards(records, "stateless") == rewards(db_reference, "stateless")


# ---------------------------------------------------------------------- issue 30: errors, transcripts, identity
def _cli(server, out, *extra, memory="none") -> list[str]:
    return ["rollout", "--env", SPECTRUM, "--agent", "llm", "--memory", memory, "--model", "scripted",
            "--base-url", server.base_url, "--env-arg", "schedule=short", "--rollouts", "1", "--workers", "1",
            "--out", str(out), "--agent-arg", "backoff=0.01", "--agent-arg", "max_retries=1", *extra]


def test_a_wrong_key_fails_before_any_job_with_one_line(tmp_path, capsys):
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        server.faults.extend([Fault("unauthorized")] * 50)
        code = cli_main(_cli(server, tmp_path / "run"))
        sent = len(server.requests)
    err = capsys.readouterr().err.strip()
    assert code == 1 and sent == 1 and not (tmp_path / "run").exists()
    assert err.count("\n") == 0 and "pre-flight" in err and "--api-key-env" in err


def test_a_dead_endpoint_mid_run_stops_the_run_invalidates_nothing_silently_and_resume_completes(tmp_path, capsys):
    out = tmp_path / "run"
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        # the pre-flight call and the stateful rollout pass, then every call fails (500s)
        server.faults.extend([Fault("none")] * 11 + [Fault("server_error")] * 400)
        code = cli_main(_cli(server, out, "--max-consecutive-errors", "3", "--fail-on-error", "100"))
        captured = capsys.readouterr()
        assert code == 3
        assert "STOPPING: 3 instances in a row failed" in captured.err and "INCOMPLETE run" in captured.err
        assert "ERRORED spectrummonitor/llm-none-scripted stateless" in captured.err
        records = load_records(out)
        bad = [r for r in records if r.get("error")]
        # one worker: the run stops right at --max-consecutive-errors (it played the whole pass, 6 errored, when
        # the policy read the records every 0.5 s and the job looked for the stop flag every 0.25 s)
        assert len(bad) == 3 and all(r["error_kind"] == "infrastructure" and r["mode"] == "stateless" for r in bad)
        assert len(records) == 8 + 2 + 3
        assert "normalized gain" not in captured.out or "invalid:" in captured.out  # never numbers over errors
        server.faults.clear()  # the endpoint is back: --resume plays the errored and unplayed instances
        assert cli_main(["rollout", "--resume", str(out)]) == 0
    records = load_records(out)
    assert len(records) == 16 and not any(r.get("error") for r in records)
    card = json.loads((out / "run_card.json").read_text())
    task = card["tasks"]["spectrummonitor/llm-none-scripted"]
    assert task["errors"]["infrastructure"] == 0 and task["mean_reward"]["mean"] is not None
    assert task["cumulative_gain"]["mean"] == pytest.approx(0.0)  # memory none: no gain, as the clean run


def test_a_dead_endpoint_stops_a_two_worker_run_within_one_instance_of_its_threshold(tmp_path, capsys):
    """Pool workers wait for the driver's look at the records after an instance lost to an infrastructure
    error: the run stops with at most one errored instance per other worker beyond --max-consecutive-errors
    (one was in flight). Before, the workers played on while the driver read, and the run recorded 6 errored
    instances, the whole schedule."""
    out = tmp_path / "run"
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        server.faults.extend([Fault("none")] * 11 + [Fault("server_error")] * 400)
        args = _cli(server, out, "--max-consecutive-errors", "3", "--fail-on-error", "100")
        args[args.index("--workers") + 1] = "2"
        assert cli_main(args) == 3
    assert "STOPPING: 3 instances in a row failed" in capsys.readouterr().err
    records = load_records(out)
    assert 3 <= sum(bool(r.get("error")) for r in records) <= 3 + 1 and len(records) < 16, records


def test_errored_instances_make_metrics_invalid_and_the_exit_code_incomplete(tmp_path, capsys):
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        server.faults.extend([Fault("none")] * 12 + [Fault("server_error")] * 4)  # 2 stateless instances fail
        code = cli_main(_cli(server, tmp_path, "--fail-on-error", "5"))
    captured = capsys.readouterr()
    assert code == 3 and "2 of 16 recorded instances errored" in captured.err
    card = json.loads((tmp_path / "run_card.json").read_text())
    task = card["tasks"]["spectrummonitor/llm-none-scripted"]
    assert task["errors"] == {"infrastructure": 2, "agent": 0, "stateful": 0, "stateless": 2}
    for name in ("normalized_gain", "normalized_reward", "mean_reward", "cumulative_gain"):
        assert task[name]["mean"] is None and task[name]["undefined"].startswith("invalid: 2 of 16 instances")
    assert "invalid: 2 of 16 instances failed on infrastructure errors" in captured.out  # the headline says why
    assert cli_main(["report", str(tmp_path), "--format", "html", "--no-plots", "--n-boot", "100"]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "Errored instances: the run is incomplete" in page and "explorer.html" in page


def test_a_run_whose_every_reply_is_a_refusal_stops_and_exits_4_keeping_its_records(tmp_path, capsys):
    """A run whose model refused every call was scored, said "N instances were scored on faulty model replies"
    in its headline and exited 0: a script would take it for a result. The fault policy stops it once more than
    --fail-on-fault (default 0.5) of the planned instances are faulted, in one line naming the faults and the
    transcripts, and the run exits 4; what was played stays recorded (and scored)."""
    from clbench.llm.transcripts import read_transcripts, transcript_file

    out = tmp_path / "run"
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        server.faults.extend([Fault("none")] + [Fault("refusal")] * 400)  # the pre-flight call passes
        code = cli_main(_cli(server, out))
    err = capsys.readouterr().err
    assert code == 4, err
    stop = [line for line in err.splitlines() if line.startswith("STOPPING: ")]
    assert len(stop) == 1, err
    assert "9 of 9 finished instances were scored on faulty model replies" in stop[0]
    assert "more than --fail-on-fault allows (8)" in stop[0] and "the model refused x" in stop[0]
    assert f"{out}/transcripts" in stop[0]
    assert "exit 4: the run was stopped for its model faults" in err and "--fail-on-fault off" in err
    # one worker: the run stops right at the threshold (8 of 16 planned), not instances later
    records = load_records(out)
    assert len(records) == 9 and all(r["error"] is None for r in records)
    assert all(any("the model refused" in f for f in r["model_faults"]) for r in records)
    traj = out / "trajectories/spectrummonitor/llm-none-scripted/stateful-r0.jsonl"
    replies = [e["reply"] for entries in read_transcripts(transcript_file(out, traj)).values() for e in entries
               if e.get("reply")]
    assert len(replies) >= 8 and all(r["refusal"] for r in replies)


@pytest.mark.parametrize("refused", [1, 2])
def test_a_refusal_among_good_replies_is_scored_and_noted_until_the_fault_threshold(tmp_path, capsys, refused):
    """Within --fail-on-fault N (here 1) a faulted instance is scored, noted in the headline and the run exits 0;
    one more stops the run right after that instance (one worker: the policy sees each faulted instance before
    the next one starts)."""
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        # pre-flight, scans 1 and 2; scan 3's first call is refused (its second is answered) and then scan 4's
        server.faults.extend([Fault("none")] * 3 + [Fault("refusal"), Fault("none"), Fault("refusal")][:2 * refused - 1])
        code = cli_main(_cli(server, tmp_path, "--fail-on-fault", "1"))
    captured = capsys.readouterr()
    assert "after 10 consecutive faulted instances or more than 1 (1)" in captured.err  # the policy says its limits
    records = load_records(tmp_path)
    faulted = [r["position"] for r in records if r.get("model_faults")]
    assert faulted == [2, 3][:refused]
    if refused == 1:
        assert code == 0 and len(records) == 16 and "STOPPING" not in captured.err
        assert "1 instances were scored on faulty model replies (act call: the model refused x1" in captured.out
    else:
        assert code == 4 and len(records) == 4
        assert "STOPPING: 2 of 4 finished instances were scored on faulty model replies, more than " \
               "--fail-on-fault allows (1): act call: the model refused x2" in captured.err


def test_fault_policy_options_are_checked_and_off_never_stops():
    policy = ErrorPolicy(fail_on_fault="off", planned=4)
    refused = {"error": None, "model_faults": ["act call: the model refused (no)"]}
    assert all(policy.observe(refused) is None for _ in range(20)) and policy.faulted == 20
    assert "faults never stop it" in policy.describe()
    for bad in ("1.5", "-1", "inf", "x"):
        with pytest.raises(ValueError, match="--fail-on-fault takes a count N >= 1 or a fraction 0 <= F < 1 or off"):
            ErrorPolicy(fail_on_fault=bad)
    with pytest.raises(ValueError, match="--max-consecutive-faults must be >= 1"):
        ErrorPolicy(max_consecutive_faults=0)
    # K faulted instances in a row stop the run; an unfaulted one ends the row; an errored one leaves it
    policy = ErrorPolicy(fail_on_fault=100, max_consecutive_faults=3, fail_on_error=100, planned=50)
    ok, lost = {"error": None}, {"error": "LLMCallError: down", "error_kind": "infrastructure"}
    for rec in (refused, refused, ok, refused, refused, lost):
        assert policy.observe(rec) is None
    assert policy.observe(refused).startswith("3 instances in a row were scored on faulty model replies "
                                              "(--max-consecutive-faults 3): act call: the model refused x5")
    assert policy.faulty


def test_transcripts_keep_every_prompt_reply_and_memory_update(tmp_path, prices, capsys):
    from clbench.llm.transcripts import read_transcripts

    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT), reasoning_tokens=2) as server:
        assert cli_main(_cli(server, tmp_path, memory="icl")) == 0
        sent = server.requests[1:]  # after the pre-flight call
    assert "bytes per instance" in capsys.readouterr().err
    calls, updates = [], []
    files = sorted((tmp_path / "transcripts" / "spectrummonitor" / "llm-icl-scripted").glob("*.jsonl"))
    assert [f.name.split("-")[0] for f in files] == ["stateful", "stateless"]  # one worker: one job per pass
    for f in files:  # stateful rollout first, then the stateless pass: the order they were sent in
        decoded = read_transcripts(f)
        assert len(decoded) == 8
        for entries in decoded.values():
            calls += [e for e in entries if e["kind"] == "call"]
            updates += [e for e in entries if e["kind"] == "memory_update"]
    assert len(calls) == len(sent)
    for call, body in zip(calls, sent):
        assert call["messages"] == body["messages"]  # exactly as sent: system prompt, memory, history
        assert call["tools"] == body.get("tools") and call["reply"]["content"] is not None or call["reply"]["tool_calls"]
        assert call["usage"]["reasoning"] == 2 and call["latency"] >= 0 and call["action"]
    assert len(updates) == 7  # icl learns from instances 1..7 before instances 2..8 of the rollout
    for before, after in zip(updates, updates[1:]):
        assert after["before"] == before["after"] and len(after["after"]) > len(after["before"])
    raw = sum(len(json.dumps(c)) for c in calls)
    assert sum(f.stat().st_size for f in files) < raw / 3  # stored compactly


def test_run_identity_settings_and_token_counts(tmp_path):
    from clbench.llm.tokens import ESTIMATE, TokenCounter

    names = {RunConfig(env_id=SPECTRUM, agent="llm", out=str(tmp_path), agent_kwargs={"memory": m, "model": mod}).system
             for m in ("none", "icl") for mod in ("gpt-4o-mini", "org/llama-3")}
    assert names == {"llm-none-gpt-4o-mini", "llm-icl-gpt-4o-mini", "llm-none-llama-3", "llm-icl-llama-3"}
    assert RunConfig(env_id=SPECTRUM, agent="reference", out=str(tmp_path)).system == "reference"
    known, unknown = TokenCounter("openai/gpt-4o-mini"), TokenCounter("scripted")
    assert known.method.startswith("tiktoken o200k_base") and known.count("hello world") == 2
    assert unknown.method == ESTIMATE and unknown.count("x" * 40) == 10


def test_a_non_default_schedule_is_not_normalized_with_the_default_baselines(tmp_path):
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        card, _ = rollout(server, tmp_path, "none", None)
    task = card["tasks"]["spectrummonitor/llm"]
    if task["r_reference"] is not None:
        pytest.skip("the short schedule has its own calibration in this checkout")
    assert task["normalized_reward"]["mean"] is None
    assert "not calibrated for schedule 'short'" in task["normalized_reward"]["undefined"]


@pytest.mark.parametrize("per_turn", [False, True])
def test_acc_updates_per_turn_when_asked(prices, per_turn):
    """ACC's turn-level controller: with per_turn the state is replaced after every answered step
    (and once more with each instance's outcome), otherwise once per instance."""
    db = "clbench/DBExplore-v3"  # questions take several steps (catalog, queries, answer)
    with ScriptedServer(ReferencePolicy(db)) as server:
        env = gym.make(db)
        kw = agent_kwargs(server, "acc", prices)
        kw["memory_args"] = {"per_turn": per_turn}
        agent = make_agent("llm", env, seed=0, **kw)
        steps = [len(_play(env, agent, env.reset(seed=0)))] + [len(_play(env, agent)) for _ in range(3)]
        updates = sum("Memory task: acc" in r["messages"][0]["content"] for r in server.requests)
        # the last instance's outcome is folded in when the next one begins (never, here)
        assert updates == (sum(s - 1 for s in steps) if per_turn else 0) + len(steps) - 1
        assert any(s > 1 for s in steps)
        if per_turn:
            assert agent.memory.state is not None and agent.state_dict()["memory_state"]["state"] == agent.memory.state


def _index_matches(index, docs: dict) -> None:
    """The incremental index holds exactly `docs` (key -> text): same keys in order, the same
    document frequencies as indexing them afresh, and the ranking of a TF-IDF refit over them."""
    from clbench.agents.llm.memory.base import tfidf_rank
    from clbench.agents.llm.memory.index import TfidfIndex

    assert index.keys() == list(docs)
    fresh = TfidfIndex()
    for key, text in docs.items():
        fresh.add(key, text)
    assert (index.df == fresh.df).all() and index.df.min() >= 0
    keys, texts = list(docs), list(docs.values())
    for query in texts[:: max(1, len(texts) // 3)] + ["reward 1 scan channel"]:
        refit = {keys[i]: s for i, s in tfidf_rank(query, texts, len(texts))}
        top = sorted(refit.values(), reverse=True)[:3]
        ranked = index.rank(query, 3)  # equal scores (repeated texts) may come in either order
        assert [s for _, s in ranked] == pytest.approx(top, abs=1e-9)
        assert all(refit[k] == pytest.approx(s, abs=1e-9) for k, s in ranked)


def test_acc_store_stays_within_its_bound_and_the_index_with_the_store(prices):
    """ACC files one artifact per instance; past `max_artifacts` the oldest the committed state does
    not cite is evicted, ids are never reused, the state cites only stored artifacts, and the
    incremental index always equals the store (also after a reload and a partial reset)."""
    from clbench.agents.llm.memory.base import snapshot_text

    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        env = gym.make(SPECTRUM, cycle=True, **SHORT)
        kw = agent_kwargs(server, "acc", prices)
        kw["memory_args"] = {"max_artifacts": 10}
        agent = make_agent("llm", env, seed=0, **kw)
        _play(env, agent, env.reset(seed=0))
        seen = []
        for n in range(2, 41):
            _play(env, agent)
            mem = agent.memory
            ids = [a["id"] for a in mem.artifacts]
            assert len(ids) == min(n - 1, 10)  # the newest instance is filed when the next begins
            assert set(mem.state["artifact_refs"]) <= set(ids)
            seen += [i for i in ids if i not in seen]
            _index_matches(mem.index, {a["id"]: a["text"] for a in mem.artifacts})
            assert mem.snapshot() == snapshot_text(mem.state_dict())  # its cached encoding: the same text
        assert seen == [f"A{i}" for i in range(1, 40)]  # counted up, never reused
        cited = agent.memory.state["artifact_refs"]
        assert cited and set(cited) <= set(ids)  # the evidence of the committed state is kept
        b = make_agent("llm", env, seed=0, **kw)
        b.load_state_dict(json.loads(json.dumps(agent.state_dict())))
        _index_matches(b.memory.index, {a["id"]: a["text"] for a in b.memory.artifacts})
        assert b.memory.snapshot() == agent.memory.snapshot()
        b.memory_event("partial-reset", fraction=0.5)
        _index_matches(b.memory.index, {a["id"]: a["text"] for a in b.memory.artifacts})
        assert b.memory.snapshot() == snapshot_text(b.memory.state_dict())
        with pytest.raises(ValueError, match="max_artifacts"):
            make_agent("llm", env, seed=0, **{**kw, "memory_args": {"max_artifacts": 8}})


@pytest.mark.parametrize("memory", ["retrieval", "playbook"])
def test_retrieval_and_playbook_stay_within_their_bounds_with_a_consistent_index(prices, memory):
    # the scripted curator repeats one lesson: with dedup off it fills the playbook to its bound
    bound = {"retrieval": {"max_items": 6}, "playbook": {"max_bullets": 6, "dedup_threshold": 1.01}}[memory]
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        env = gym.make(SPECTRUM, cycle=True, **SHORT)
        kw = agent_kwargs(server, memory, prices)
        kw["memory_args"] = bound
        agent = make_agent("llm", env, seed=0, **kw)
        _play(env, agent, env.reset(seed=0))
        for _ in range(16):
            _play(env, agent)
            mem = agent.memory
            if memory == "retrieval":
                docs = dict(zip(mem._keys, (it["text"] for it in mem.items)))
            else:
                docs = {b["id"]: b["content"] for b in mem.bullets}
            assert 0 < len(docs) <= 6
            _index_matches(mem.index, docs)
        assert len(docs) == 6


def test_a_transcript_is_found_from_a_run_directory_named_relative_to_the_current_folder(tmp_path, monkeypatch):
    """Red team s16: `clbench view runs/x` and `report runs/x --format html` failed with "not a trajectory path"
    whenever the run directory was relative (the README's own commands)."""
    from clbench.llm.transcripts import transcript_file

    monkeypatch.chdir(tmp_path)
    run_dir = Path("runs/x")
    traj = run_dir / "trajectories/memoryprobe/llm/stateful-r0.jsonl"
    expected = transcript_file(tmp_path / run_dir, tmp_path / traj)
    assert transcript_file(run_dir, traj).absolute() == expected.absolute()
    assert transcript_file(run_dir, "trajectories/memoryprobe/llm/stateful-r0.jsonl").absolute() == expected.absolute()


def test_settings_a_run_cannot_take_are_refused_in_one_line(tmp_path, capsys):
    """Red team s16: `--resume DIR --base-url ... --model ...` silently played the old settings, `--temperature nan`
    became null and `--agent-arg max_tokens=abc` failed with a comparison error."""
    assert cli_main(["rollout", "--resume", str(tmp_path), "--model", "other", "--base-url", "http://x/v1"]) != 0
    assert "--model, --base-url cannot change them" in capsys.readouterr().err
    for extra in (["--temperature", "nan"], ["--agent-arg", "max_tokens=abc"]):
        assert cli_main(["rollout", "--env", SPECTRUM, "--agent", "llm", "--model", "m", "--base-url",
                         "http://127.0.0.1:1/v1", "--out", str(tmp_path / "x"), *extra]) != 0
        err = capsys.readouterr().err
        assert ("temperature must be a finite number" in err or "max_tokens must be a whole number" in err), err


def test_a_prompt_past_the_context_is_the_agents_loss_not_an_infrastructure_error(tmp_path, prices):
    """Red team s16: an instance whose own turns outgrew --context-tokens was still sent, and the endpoint's
    "maximum context length" 400 was recorded as an infrastructure error, which invalidates the task and makes
    every --resume replay the same overflow. Both now end the instance as an agent error (scored 0, said so)."""
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        server.faults.append(Fault("context"))
        _, records = rollout(server, tmp_path / "endpoint", "none", prices, mode="stateful")
    first = records[0]
    assert first["error_kind"] == "agent" and "exceeds the model's context" in first["error"], first
    assert all(r["error"] is None for r in records[1:])
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        _, records = rollout(server, tmp_path / "budget", "none", prices, mode="stateful", max_tokens=64,
                             context_tokens=100)
        assert not server.requests[1:]  # only the pre-flight call was sent
    assert all(r["error_kind"] == "agent" and "exceed --context-tokens 100" in r["error"] for r in records), records[0]


def test_a_resumed_run_counts_what_its_replaced_attempts_cost(tmp_path, prices, capsys):
    """Red team s16: a stateful rollout restarted on --resume (an instance of it failed) replays instances already
    paid for; the card counted each instance's last record only, so the first attempts' cost dropped out."""
    from clbench.reporting.tables import usage_line
    from clbench.results import iter_jsonl

    out = tmp_path / "run"
    with ScriptedServer(ReferencePolicy(SPECTRUM, **SHORT)) as server:
        server.faults.extend([Fault("none")] * 3 + [Fault("server_error")] * 2)  # a stateful instance fails
        assert cli_main(_cli(server, out, "--agent-arg", f"prices={prices}", "--fail-on-error", "100")) == 3
        assert cli_main(["rollout", "--resume", str(out)]) == 0
    capsys.readouterr()
    lines = [rec for _, rec in iter_jsonl(out / "results.jsonl")]
    final = {(r["mode"], r["rollout"], r["instance_id"]): r for r in lines}
    first_attempts = sum(r["cost"] or 0.0 for r in lines) - sum(r["cost"] or 0.0 for r in final.values())
    assert first_attempts > 0  # paid instances were played again
    task = json.loads((out / "run_card.json").read_text())["tasks"]["spectrummonitor/llm-none-scripted"]
    assert task["usage"]["replaced_cost"] == pytest.approx(first_attempts)
    assert "USD more on attempts played again" in usage_line({**task, "task": "spectrummonitor", "system": "s"})
