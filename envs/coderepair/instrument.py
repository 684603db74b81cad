"""Test modules rewritten so that their checks record what they observe instead of deciding.

Run on the host with `ast` only (nothing of the repository is imported). Every check of a test
module (`assert`, the `unittest` assert methods, `pytest.raises`/`warns`, `assertRaises`, the
`assert_called*` methods of mocks) becomes a call into the recorder (recorder.py, copied into
the grading folder as `_clbench_rec`) that records the values the check looks at, under a site
number: the operands that are not literals, and the outcome of each comparison between two
non-literal operands. Literal operands, the expected values of most checks, are dropped from the
rewritten module; polarity is dropped too (`==`/`!=`, `is`/`is not`, `in`/`not in`,
`assertTrue`/`assertFalse`, `assert x`/`assert not x` record the same thing), so the module the
sandbox runs says what is looked at, never what it should be. The grader compares the records
with those of the fixed tree (grading.py).
"""
from __future__ import annotations

import ast
import re

#: the name rewritten modules import the recorder as (no leading double underscore: no mangling in classes)
REC = "_clb_rec_"
RECORDER_MODULE = "_clbench_rec"
#: normalized comparison operators: a check and its negation record the same thing
_OPS = {ast.Eq: "==", ast.NotEq: "==", ast.Is: "is", ast.IsNot: "is", ast.In: "in", ast.NotIn: "in",
        ast.Lt: "<", ast.GtE: "<", ast.Gt: ">", ast.LtE: ">"}
_UNITTEST_COMPARE = {
    "assertEqual": "==", "assertEquals": "==", "assertNotEqual": "==", "assertNotEquals": "==",
    "assertListEqual": "==", "assertTupleEqual": "==", "assertDictEqual": "==", "assertSetEqual": "==",
    "assertSequenceEqual": "==", "assertMultiLineEqual": "==", "assertCountEqual": "count",
    "assertItemsEqual": "count", "assertIs": "is", "assertIsNot": "is", "assertIn": "in", "assertNotIn": "in",
    "assertLess": "<", "assertGreaterEqual": "<", "assertGreater": ">", "assertLessEqual": ">",
}
_UNITTEST_TRUTH = {"assertTrue", "assertFalse", "assert_", "failUnless", "failIf"}
_UNITTEST_NONE = {"assertIsNone", "assertIsNotNone"}
_UNITTEST_ISINSTANCE = {"assertIsInstance", "assertNotIsInstance"}
_UNITTEST_REGEX = {"assertRegex", "assertNotRegex", "assertRegexpMatches", "assertNotRegexpMatches"}
_UNITTEST_ALMOST = {"assertAlmostEqual", "assertNotAlmostEqual", "assertAlmostEquals"}
_RAISES = {"assertRaises", "assertRaisesRegex", "assertRaisesRegexp"}
_WARNS = {"assertWarns", "assertWarnsRegex"}
_MOCK = {"assert_called_with": "args", "assert_called_once_with": "once_args", "assert_called_once": "once",
         "assert_called": "called", "assert_not_called": "count"}


def is_literal(node: ast.AST) -> bool:
    """A constant, or a container of constants (what a test writes as its expected value)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return is_literal(node.operand)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(is_literal(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and is_literal(k) and is_literal(v) for k, v in zip(node.keys, node.values))
    return False


def _rec(method: str, site: int, *args: ast.expr, keywords=()) -> ast.Call:
    return ast.Call(ast.Attribute(ast.Name(REC, ast.Load()), method, ast.Load()),
                    [ast.Constant(site), *args], list(keywords))


def _lit() -> ast.expr:
    """Stands for a dropped literal operand."""
    return ast.Attribute(ast.Name(REC, ast.Load()), "LIT", ast.Load())


class Instrument(ast.NodeTransformer):
    """Rewrites one test module's checks (see the module docstring) and renames the named tests."""

    def __init__(self, renames: dict[tuple[str | None, str], str] | None = None):
        self.renames = renames or {}
        self.sites = 0
        self.cls: list[str] = []

    def site(self) -> int:
        self.sites += 1
        return self.sites

    # ------------------------------------------------------------------ names
    def visit_ClassDef(self, node: ast.ClassDef):
        self.cls.append(node.name)
        self.generic_visit(node)
        self.cls.pop()
        return node

    def _visit_def(self, node):
        owner = self.cls[-1] if self.cls else None
        new = self.renames.get((owner, node.name))
        if new is not None:
            node.name = new
        self.generic_visit(node)
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = _visit_def

    def visit_Attribute(self, node: ast.Attribute):
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id == "self":  # self.test_x(...) follows a rename
            for (_, old), new in self.renames.items():
                if node.attr == old:
                    node.attr = new
        return node

    # ------------------------------------------------------------------ checks
    def _compare(self, site: int, ops: list[str], operands: list[ast.expr]) -> ast.Call:
        args = [_lit() if is_literal(o) else o for o in operands]
        return _rec("compare", site, ast.Constant(",".join(ops)), *args)

    def _truth_of(self, site: int, test: ast.expr) -> ast.expr:
        while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test = test.operand  # `assert not x` records what `assert x` records
        if isinstance(test, ast.Compare) and all(type(op) in _OPS for op in test.ops):
            none_check = (len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot))
                          and any(isinstance(o, ast.Constant) and o.value in (None, True, False)
                                  for o in (test.left, *test.comparators)))
            if none_check:  # `x is None`: whether, not what x is
                return _rec("truth", site, ast.Compare(test.left, [ast.Is()], test.comparators))
            return self._compare(site, [_OPS[type(op)] for op in test.ops], [test.left, *test.comparators])
        return _rec("truth", site, test)

    def visit_Assert(self, node: ast.Assert):
        self.generic_visit(node)
        return ast.copy_location(ast.Expr(self._truth_of(self.site(), node.test)), node)

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else None
        owner = func.value if isinstance(func, ast.Attribute) else None
        if name is None or any(isinstance(a, ast.Starred) for a in node.args):
            return node
        args = node.args
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        on_self = isinstance(owner, ast.Name) and owner.id == "self"
        on_pytest = isinstance(owner, ast.Name) and owner.id == "pytest"
        new = None
        if on_self and name in _UNITTEST_COMPARE and len(args) >= 2:
            new = self._compare(self.site(), [_UNITTEST_COMPARE[name]], args[:2])
        elif on_self and name in _UNITTEST_TRUTH and args:
            new = self._truth_of(self.site(), args[0])
        elif on_self and name in _UNITTEST_NONE and args:
            new = _rec("truth", self.site(), ast.Compare(args[0], [ast.Is()], [ast.Constant(None)]))
        elif on_self and name in _UNITTEST_ISINSTANCE and len(args) >= 2:
            new = _rec("truth", self.site(), ast.Call(ast.Name("isinstance", ast.Load()), args[:2], []))
        elif on_self and name in _UNITTEST_REGEX and len(args) >= 2:
            new = _rec("regex", self.site(), args[0], args[1])
        elif on_self and name in _UNITTEST_ALMOST and len(args) >= 2:
            places = kw.get("places", args[2] if len(args) > 2 else ast.Constant(None))
            new = _rec("almost", self.site(), *[_lit() if is_literal(a) else a for a in args[:2]],
                       places, kw.get("delta", ast.Constant(None)))
        elif (on_self and name == "assertRaises" or on_pytest and name == "raises") and len(args) >= 2:
            new = self._call_raises(node, args[1:])  # the call form: assertRaises(E, f, *args)
        elif on_self and name in ("assertRaisesRegex", "assertRaisesRegexp") and len(args) >= 3:
            new = self._call_raises(node, args[2:])
        elif name in _MOCK and not on_self and not on_pytest:
            new = _rec("mock", self.site(), ast.Constant(_MOCK[name]), owner)
        return node if new is None else ast.copy_location(new, node)

    def _call_raises(self, node: ast.Call, args: list[ast.expr]) -> ast.Call:
        keywords = [k for k in node.keywords if k.arg not in ("msg", "match")]
        return _rec("call_raises", self.site(), *args, keywords=keywords)

    def visit_With(self, node: ast.With):
        for item in node.items:
            call = item.context_expr
            if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
                continue
            owner, name = call.func.value, call.func.attr
            on_self = isinstance(owner, ast.Name) and owner.id == "self"
            on_pytest = isinstance(owner, ast.Name) and owner.id == "pytest"
            if on_self and name in _RAISES or on_pytest and name == "raises":
                match = None
                if name != "raises" and len(call.args) >= 2:
                    match = call.args[1]
                for k in call.keywords:
                    if k.arg == "match":
                        match = k.value
                item.context_expr = ast.copy_location(
                    _rec("raises", self.site(), *([match] if match is not None else [])), call)
            elif on_self and name in _WARNS or on_pytest and name in ("warns", "deprecated_call"):
                item.context_expr = ast.copy_location(_rec("warns", self.site()), call)
        self.generic_visit(node)
        return node

    visit_AsyncWith = visit_With


def instrument(source: str, renames: dict[tuple[str | None, str], str] | None = None) -> tuple[str, int]:
    """(rewritten module source, number of check sites); the recorder import goes first (after a
    docstring and `from __future__` imports, which must stay first)."""
    tree = ast.parse(source)
    walker = Instrument(renames)
    tree = walker.visit(tree)
    body = tree.body
    at = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        at = 1
    while at < len(body) and isinstance(body[at], ast.ImportFrom) and body[at].module == "__future__":
        at += 1
    body.insert(at, ast.Import([ast.alias(RECORDER_MODULE, REC)]))
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n", walker.sites
