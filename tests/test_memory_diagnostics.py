"""Aging cards and ACC's measures for the scripted memory strategies on MemoryProbe (deterministic),
and the probe ladder on the scripted strategies."""
from __future__ import annotations

import pytest

from clbench.cli import main
from clbench.diagnostics.acc_measures import acc_measures, measures_table
from clbench.diagnostics.aging import aging_card, card_markdown, half_life, maintenance
from clbench.diagnostics.play import play_rollout

ENV = "clbench/MemoryProbe-v2"


def _o(correct, verdict, error="", structure="plain", age=0):
    return {"qid": "q", "key": "k", "category": "config", "structure": structure, "kind": "explicit", "depth": 1,
            "age_sessions": age, "correct": correct, "verdict": verdict, "error": error}


def test_acc_rates_follow_their_definitions():
    sessions = [{"position": 0, "variant": "a", "memory_tokens": 10, "context_tokens": 10, "session_tokens": 90,
                 "outcomes": [_o(True, "right"), _o(False, "wrong", "unstated"), _o(False, "abstained")]},
                {"position": 1, "variant": "b", "memory_tokens": 30, "context_tokens": 10, "session_tokens": 90,
                 "outcomes": [_o(False, "wrong", "superseded", "chain", 1), _o(True, "right", "", "multi-hop", 1),
                              _o(False, "wrong", "other-key")]}]
    m = acc_measures(sessions, budget=20)
    assert (m["questions"], m["answered"]) == (6, 5)
    assert m["hallucination_rate"] == m["drift_rate"] == m["confusion_rate"] == pytest.approx(1 / 5)
    assert m["abstention_rate"] == pytest.approx(1 / 6)
    assert m["constraint_retention"] == 0.5 and m["constraint_retention_by_variant"] == {"b": 0.5}
    fp = m["footprint"]
    assert fp["per_turn"] == [10, 30] and fp["slope_per_turn"] == pytest.approx(20) and fp["bounded"] is False
    assert fp["prompt_share_per_turn"] == [0.1, 0.1]


def test_half_life_and_maintenance_on_hand_made_curves():
    by_age = {0: {"n": 5, "accuracy": 1.0}, 2: {"n": 5, "accuracy": 0.6}, 4: {"n": 5, "accuracy": 0.2}}
    assert half_life(by_age) == pytest.approx(2 + (0.6 - 0.5) / 0.4 * 2)
    assert half_life({0: {"n": 1, "accuracy": 1.0}, 3: {"n": 1, "accuracy": 0.9}}) is None

    def run(accs):
        return [{"outcomes": [_o(bool(a), "right" if a else "wrong")]} for a in accs]
    m = maintenance(run([1, 1, 1, 1, 1, 1, 1, 1]), run([1, 1, 1, 0, 0, 1, 1, 1]), 3, window=2)
    assert (m["before"], m["after"], m["control_after"], m["delta"], m["recovery_sessions"]) == (1.0, 0.0, 1.0, -1.0, 2)


def test_acc_measures_of_the_scripted_strategies_are_deterministic_and_ordered():
    runs = {a: play_rollout(ENV, a) for a in ("truncation", "memory-bank", "file-state")}
    assert play_rollout(ENV, "truncation") == runs["truncation"]
    m = {a: acc_measures(s, budget=1098) for a, s in runs.items()}
    assert m["truncation"]["hallucination_rate"] > m["file-state"]["hallucination_rate"]
    assert m["truncation"]["confusion_rate"] > m["file-state"]["confusion_rate"] == 0.0
    assert m["truncation"]["constraint_retention"] < m["memory-bank"]["constraint_retention"] \
        < m["file-state"]["constraint_retention"]
    # in-context memories stay within the budget; file-backed state grows on disk, and only what the
    # answers read back enters the prompt
    assert m["truncation"]["footprint"]["bounded"] and m["memory-bank"]["footprint"]["bounded"]
    assert not m["file-state"]["footprint"]["bounded"] and m["file-state"]["footprint"]["slope_per_turn"] > 0
    assert m["file-state"]["footprint"]["prompt_share_mean"] < 0.5 * m["truncation"]["footprint"]["prompt_share_mean"]
    assert "| file-state |" in measures_table(m)


def test_drift_rate_counts_superseded_values_of_a_frozen_reference():
    """Frozen before the medium sessions, the reference keeps answering with values updated since:
    ACC's drift (a superseded value used after its update); unfrozen it never does."""
    frozen = acc_measures(play_rollout(ENV, "reference", agent_kwargs={"freeze_at": 8}))
    live = acc_measures(play_rollout(ENV, "reference"))
    assert live["drift_rate"] == live["hallucination_rate"] == 0.0 and live["constraint_retention"] == 1.0
    assert frozen["drift_rate"] > 0.05 and frozen["constraint_retention"] < 0.6


def test_revision_accumulator_and_multi_hop_questions_are_measurable():
    sessions = play_rollout(ENV, "file-state")
    rows = [o for s in sessions for o in s["outcomes"]]
    for structure, at_least in (("chain", 15), ("accumulator", 10), ("multi-hop", 6)):
        sel = [o["correct"] for o in rows if o["structure"] == structure]
        assert len(sel) >= at_least and 0 < sum(sel), structure


def test_aging_card_of_the_scripted_strategies():
    cards = {a: aging_card(ENV, a, n_boot=300) for a in ("truncation", "file-state")}
    tr, fs = cards["truncation"], cards["file-state"]
    assert tr["headline"]["decay_slope"] < fs["headline"]["decay_slope"] <= 0
    assert tr["headline"]["half_life"] is not None and tr["headline"]["half_life"] < (fs["headline"]["half_life"] or 99)
    assert set(tr["fidelity_by_family"]) == {"plain recall", "revision", "interference", "accumulator", "multi-hop"}
    assert set(tr["maintenance"]) == {"flush@8", "recompact@8", "partial-reset:0.5@8"}
    assert fs["maintenance"]["flush@8"]["delta"] < -0.5 and fs["maintenance"]["recompact@8"]["delta"] == 0.0
    for card in cards.values():
        pl = card["probe_ladder"]
        assert pl["P1"] <= pl["P2"] <= pl["P3"] == 1.0
        assert sum(pl["shares"].values()) == pytest.approx(1.0)
        for k, (lo, hi) in pl["ci"].items():
            assert lo - 1e-9 <= pl["shares"][k] <= hi + 1e-9
    assert "| probe family |" in card_markdown(tr)


def test_the_probe_ladder_runs_the_scripted_strategies(tmp_path, capsys):
    assert main(["probe-ladder", "--env", ENV, "--agent", "memory-bank", "--out", str(tmp_path / "pl"),
                 "--quiet"]) == 0
    assert "write share" in capsys.readouterr().out
    assert main(["aging-card", "--env", "clbench/Poker-v9"]) == 1


def test_the_docs_show_the_numbers_the_code_computes():
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "memory-diagnostics.md").read_text()
    m = acc_measures(play_rollout(ENV, "truncation"))
    row = (f"| truncation | {m['answered']}/{m['questions']} | {m['hallucination_rate']:.3f} | {m['drift_rate']:.3f} "
           f"| {m['confusion_rate']:.3f} | {m['constraint_retention']:.3f} |")
    assert row in doc


def test_acc_measures_of_the_llm_agent_against_a_local_server():
    """The LLM agent's memories through the same measures, against a real local OpenAI-compatible
    server whose scripted model plays the reference from the prompt: in-context memory keeps
    everything and its prompt grows every turn; no memory answers only the session in view."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from openai_server import ReferencePolicy, ScriptedServer

    short = {"schedule": "short"}
    with ScriptedServer(ReferencePolicy(ENV, **short)) as server:
        m = {}
        for memory in ("icl", "none"):
            kw = {"memory": memory, "model": "scripted", "base_url": server.base_url, "backoff": 0.01}
            m[memory] = acc_measures(play_rollout(ENV, "llm", short, agent_kwargs=kw))
    assert m["icl"]["constraint_retention"] > m["none"]["constraint_retention"]
    assert m["icl"]["answered"] > m["none"]["answered"] and m["icl"]["hallucination_rate"] == 0.0
    grow = {k: v["prompt_per_turn"]["slope_per_turn"] for k, v in m.items()}
    assert grow["icl"] > 10 * max(grow["none"], 1.0)
    assert "prompt tokens" in measures_table(m)


def test_the_acc_judge_through_the_client_agrees_with_the_env_where_a_rule_can_tell():
    """ACC's agent judge over the OpenAI-compatible client, against a scripted judge model: a claim is
    supported when the record states its value, and contradicts the current value when it differs.
    On MemoryProbe the env knows the answer, so the judge's verdicts can be checked (running totals,
    whose value is a sum no statement contains, are left to the env)."""
    import json as _json
    import re
    import sys
    from pathlib import Path

    from clbench.diagnostics.acc_judge import SYSTEM, Judge, judged_rates, memoryprobe_claims
    from clbench.envs.memoryprobe.text import values_match

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from openai_server import ScriptedServer

    def scripted_judge(body):
        assert body["messages"][0]["content"] == SYSTEM
        item = _json.loads(body["messages"][-1]["content"])
        value = item["claim"].partition(": ")[2]
        current = item["current"].partition(": ")[2]
        token = re.compile(rf"(?<![\w.+]){re.escape(value)}(?!\w|\.\d)", re.I)
        said = any(token.search(line) for line in item["record"]) or values_match(current, value)
        return {"content": "Verdict: " + _json.dumps({"supported": said,
                                                       "contradicts_current": not values_match(current, value)})}

    claims = [c for runs in (play_rollout(ENV, "truncation"),
                             play_rollout(ENV, "reference", agent_kwargs={"freeze_at": 8}))
              for c in memoryprobe_claims(ENV, runs) if c["structure"] != "accumulator"]
    assert len(claims) > 100 and {c["error"] for c in claims} >= {"", "superseded", "other-key"}
    with ScriptedServer(scripted_judge) as server:
        rates = judged_rates(Judge("judge", base_url=server.base_url, backoff=0.01), claims)
    assert rates["decided"] == len(claims)
    for v in rates["verdicts"]:
        assert v["supported"] == (v["error"] in ("", "superseded")), v
        assert v["contradicts_current"] == (v["error"] != ""), v
    n = len(claims)
    assert rates["drift_rate"] == pytest.approx(sum(c["error"] == "superseded" for c in claims) / n)
    assert rates["hallucination_rate"] == pytest.approx(sum(c["error"] in ("unstated", "other-key") for c in claims) / n)
    with ScriptedServer(lambda body: {"content": "no idea"}) as server:
        bad = judged_rates(Judge("judge", base_url=server.base_url, backoff=0.01), claims[:2])
    assert bad["decided"] == 0 and bad["hallucination_rate"] is None and "unreadable" in bad["verdicts"][0]["error"]
