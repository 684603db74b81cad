"""benchmarks/: every overhead ratio says what it divides by what (its definition is printed under
the table run_all.py reports)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
#: benches owned elsewhere whose ratios are checked where they are written
OTHERS = {"bench_vector.py"}


def _ratio_calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("Ratio", "not_available"):
            yield node


@pytest.mark.parametrize("path", sorted(p for p in BENCHMARKS.glob("bench_*.py") if p.name not in OTHERS),
                         ids=lambda p: p.name)
def test_every_ratio_carries_its_definition(path):
    """Ratio(name, samples, target, better, definition) and not_available(name, target, better, why,
    definition): the definition is given, positionally or by keyword."""
    for call in _ratio_calls(path):
        assert len(call.args) >= 5 or any(k.arg == "definition" for k in call.keywords), \
            f"{path.name}:{call.lineno}: a ratio without its definition"


def test_run_all_keeps_a_rows_definition():
    """A bench's dict row keeps its definition as a Ratio, and one without a target says so
    (run_all.as_ratio)."""
    import sys

    sys.path.insert(0, str(BENCHMARKS))
    try:
        import run_all
    finally:
        sys.path.remove(str(BENCHMARKS))
    row = run_all.as_ratio({"measure": "m", "anchor": 1.0, "value": 1.0, "target": 1.2, "definition": "a / b"})
    assert row.definition == "a / b"
    assert "reported, no target" in run_all.as_ratio({"measure": "m", "anchor": 1.0, "value": 1.0,
                                                      "target": None}).definition
