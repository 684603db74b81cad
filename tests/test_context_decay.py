"""The context-decay protocol with the scripted memory strategies: the sweep, the metrics as
defined, and the paper's qualitative findings (docs/memory-diagnostics.md holds the full table)."""
from __future__ import annotations

import pytest

from clbench.cli import main
from clbench.diagnostics import context_decay as cd
from clbench.envs.memoryprobe.text import count_tokens


@pytest.fixture(scope="module")
def sweep():
    runs = cd.run_sweep(lengths=(100, 300), trials=3)
    return runs, cd.summarize(runs)


def test_conversation_plants_needles_at_known_turns_half_implicit():
    turns, needles = cd.conversation(200, 0)
    assert len(turns) == 200 and len(needles) == 20 and len({n.key for n in needles}) == 20
    assert 5 <= sum(n.implicit for n in needles) <= 15
    for n in needles:
        assert n.key in turns[n.turn] and n.value in turns[n.turn]
        assert ("[FACT]" in turns[n.turn]) != n.implicit
    assert cd.conversation(200, 0) == (turns, needles) and cd.conversation(200, 1) != (turns, needles)


def test_metrics_follow_their_definitions():
    run = cd.run_one("truncation", 200, 0)
    turns, needles = cd.conversation(200, 0)
    assert run["total_tokens"] == sum(count_tokens(t) for t in turns)
    assert run["budget"] == int(0.15 * run["total_tokens"]) and run["context_tokens"] <= run["budget"]
    assert run["accuracy"] == run["found"] / run["needles"] == sum(o["correct"] for o in run["outcomes"]) / 20
    assert run["compression"] == pytest.approx(run["total_tokens"] / run["context_tokens"])
    assert run["density"] == pytest.approx(1000 * run["found"] / run["context_tokens"])
    assert [o["quartile"] for o in run["outcomes"]] == [min(3, 4 * n.turn // 200) for n in needles]
    fs = cd.run_one("file-state", 200, 0)
    assert fs["context_tokens"] < fs["stored_tokens"]  # only what answers read back enters the prompt
    assert cd.run_one("file-state", 200, 0) == fs  # deterministic


def test_the_papers_findings_hold_for_the_scripted_strategies(sweep):
    _, s = sweep
    order = [s[k]["accuracy"] for k in ("truncation", "sliding-summary", "memory-bank", "file-state")]
    assert order == sorted(order) and s["file-state"]["accuracy"] > 0.8 and s["truncation"]["accuracy"] < 0.25
    assert max(s["truncation"]["by_quartile"][:3]) < 0.05 and s["truncation"]["by_quartile"][3] > 0.3  # amnesia
    for k in ("memory-bank", "file-state"):
        assert 15 <= s[k]["gap_pp"] <= 45  # implicit needles are harder to extract
    assert 6 <= s["truncation"]["compression"] <= 8  # 1 / 0.15 of the conversation stays in context
    assert s["file-state"]["density"] > 15 * s["truncation"]["density"]


def test_the_command_prints_the_tables_beside_the_papers(tmp_path, capsys):
    out = tmp_path / "cd.json"
    assert main(["context-decay", "--lengths", "60", "--trials", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| file-state |" in text and "(0.886)" in text and "density ratio" in text and out.exists()
    assert main(["context-decay", "--strategies", "nope"]) == 1
    assert "unknown strategies" in capsys.readouterr().err
