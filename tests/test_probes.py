"""The oracle probe ladder on MemoryProbe-v2 through a real local chat-completions server."""
from __future__ import annotations

import json
import re

import pytest

from clbench.cli import main
from clbench.probes import ladder, select_lines
from tests.openai_server import ScriptedServer

QUESTION = re.compile(r"^Q\d+ \[([\w-]+)\] (.+)$", re.MULTILINE)
STATEMENT = re.compile(r"^(?:- |\[FACT\] )?([A-Za-z0-9][^:\n]{2,80}): ([^\n]+)$", re.MULTILINE)


class FactReader:
    """A model that answers each recall question from the last `key: value` line in its prompt
    whose key occurs in the question: it can only use what the prompt carries."""

    def __call__(self, body: dict) -> dict:
        text = "\n".join(str(m.get("content") or "") for m in body["messages"])
        questions = QUESTION.findall(str(body["messages"][-1].get("content") or ""))
        statements = STATEMENT.findall(text)
        lines = []
        for qid, question in questions:
            for key, value in reversed(statements):
                if key.lower() in question.lower() and not key.startswith(("Q", "User", "Assistant")):
                    lines.append(f"ANSWER {qid}: {value.strip()}")
                    break
        return {"content": "\n".join(lines) or "ANSWER none: none"}


def test_ladder_arithmetic_and_selection():
    r = ladder(0.2, 0.5, 0.9, 1.0)
    assert r["write"] == pytest.approx(0.4) and r["read"] == pytest.approx(0.3)
    assert r["utilization"] == pytest.approx(0.1)
    assert sum(r["shares"].values()) == pytest.approx(1.0)
    facts = [{"key": "auth provider for Borealis", "text": "auth provider for Borealis: Cognito", "mentions": []}]
    memory = "We chose pizza.\n[FACT] auth provider for Borealis: Cognito\nunrelated"
    assert select_lines(memory, facts) == "[FACT] auth provider for Borealis: Cognito"


def _ladder(tmp_path, memory):
    with ScriptedServer(FactReader(), supports_tools=False) as server:
        out = tmp_path / memory
        assert main(["probe-ladder", "--env", "clbench/MemoryProbe-v2", "--agent", "llm", "--memory", memory,
                     "--model", "scripted", "--base-url", server.base_url, "--env-arg", "schedule=short",
                     "--workers", "1", "--quiet", "--out", str(out)]) == 0
    prompts = [json.dumps(r["messages"]) for r in server.requests]
    assert any("Verified facts for this instance" in p for p in prompts)  # P3 injected the gold facts
    return json.loads((out / "probe_ladder.json").read_text())


def test_probe_ladder_splits_write_and_read_errors(tmp_path, capsys, monkeypatch):
    from clbench.diagnostics.worlds import calibrate_world

    monkeypatch.setenv("CLBENCH_CACHE", str(tmp_path / "cache"))
    calibrate_world("clbench/MemoryProbe-v2", {"schedule": "short"})  # the short schedule's own r_max
    none, icl = _ladder(tmp_path, "none"), _ladder(tmp_path, "icl")
    for r in (none, icl):
        assert r["P3"] >= r["P2"] - 1e-9 and sum(r["shares"].values()) == pytest.approx(1.0)
    # without memory nothing was written: the oracle finds nothing to select, the loss is write error
    assert none["P2"] == pytest.approx(none["P1"], abs=0.05)
    assert none["P3"] > none["P1"] + 0.3 and none["shares"]["write"] > 0.6
    # icl carries the earlier transcripts: far less is lost, and what selection keeps is enough
    assert icl["P1"] > none["P1"] + 0.3
    assert icl["P2"] >= icl["P1"] - 0.05
    assert icl["error"] < none["error"] / 2
    assert "write share" in capsys.readouterr().out
