"""Order comparisons with a literal bound (`assert t >= 500`, `self.assertLess(wait, 20)`): their
operand is a measurement (elapsed time, a random wait) whose exact value two runs of the fixed
release can share by chance. The rewritten module records the operand (the bound is dropped, as
every literal); the grader, which has the original module, applies the bound to the recorded
value on both sides and compares the outcomes instead of the values (grading.judge).
"""
from __future__ import annotations

import ast
import operator

from clbench.envs.coderepair.instrument import Instrument, is_literal

_OPS = {"Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt, "GtE": operator.ge}
_UNITTEST = {"assertLess": "Lt", "assertLessEqual": "LtE", "assertGreater": "Gt", "assertGreaterEqual": "GtE"}


class _Bounds(Instrument):
    """The rewriting's own walk (same site numbers), noting each bounded order comparison."""

    def __init__(self):
        super().__init__()
        self.bounds: dict[int, tuple[str, object, int]] = {}

    def _note(self, new: ast.AST, op: str | None, operands: list[ast.expr]) -> None:
        call = new.value if isinstance(new, ast.Expr) else new
        if op not in _OPS or len(operands) != 2 or sum(map(is_literal, operands)) != 1 or not isinstance(call, ast.Call):
            return
        side = 0 if is_literal(operands[0]) else 1
        try:
            self.bounds[call.args[0].value] = (op, ast.literal_eval(operands[side]), side)
        except (ValueError, AttributeError, IndexError):
            pass

    def visit_Assert(self, node: ast.Assert):
        new = super().visit_Assert(node)
        test = node.test
        while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test = test.operand
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            self._note(new, type(test.ops[0]).__name__, [test.left, *test.comparators])
        return new

    def visit_Call(self, node: ast.Call):
        new = super().visit_Call(node)
        func = node.func
        if (new is not node and isinstance(func, ast.Attribute) and func.attr in _UNITTEST
                and isinstance(func.value, ast.Name) and func.value.id == "self"):
            self._note(new, _UNITTEST[func.attr], node.args[:2])
        return new


def bounds(source: str) -> dict[int, tuple[str, object, int]]:
    """site -> (operator name, literal bound, the bound's side) for one test module."""
    walker = _Bounds()
    walker.visit(ast.parse(source))
    return walker.bounds


def _number(recorded: str):
    """A recorded observation (JSON text) as a number, None when it is not one."""
    import json

    value = json.loads(recorded)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, list) and len(value) == 2 and value[0] in ("float", "int"):
        try:
            return float(value[1]) if value[0] == "float" else int(value[1])
        except ValueError:
            return None
    return None


def holds(bound: tuple[str, object, int], recorded: str | None):
    """The bound applied to a recorded operand: True/False, or the recorded text when it is no number."""
    if recorded is None:
        return None
    op, literal, side = bound
    value = _number(recorded)
    if value is None or not isinstance(literal, (int, float)):
        return recorded
    a, b = (literal, value) if side == 0 else (value, literal)
    return _OPS[op](a, b)
