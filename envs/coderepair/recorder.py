"""The recorder the rewritten test modules call (copied into the grading folder as `_clbench_rec`).

It runs in the sandbox, in the same process as the repository's code: nothing here is trusted
and nothing here knows an expected value. Each check records what it observes, as plain data
(`observe`), under "<site>.<part>" in the current test's list; no check fails a test. The
grader compares the records with the fixed tree's (grading.py) outside the sandbox.
"""
import math
import re
import warnings

#: stands for a literal operand the rewriting dropped
LIT = object()
#: test node id -> list of [key, observed value]; set by the runner
RECORDS = {}
CURRENT = ["<collection>"]
#: records kept per test (a statistical test checks thousands of draws; its first ones say enough)
PER_TEST = 2000
_MAX_DEPTH = 4
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _name(obj) -> str:
    kind = obj if isinstance(obj, type) else type(obj)
    return f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', kind.__name__)}"


def observe(value, depth: int = 0):
    """`value` as JSON data; what differs between runs (object addresses) is left out."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _ADDRESS.sub(" at 0x?", value)[:20000]
    if isinstance(value, int):
        return value if abs(value) < 2 ** 53 else ["int", str(value)]
    if isinstance(value, float):
        return ["float", "nan"] if math.isnan(value) else ["float", f"{value:.10g}"]
    if isinstance(value, (bytes, bytearray)):
        return ["bytes", bytes(value).hex()[:4000]]
    if depth >= _MAX_DEPTH:
        return ["deep", _name(value)]
    if isinstance(value, BaseException):
        return ["exc", _name(value), observe(list(value.args), depth + 1)]
    if isinstance(value, type):
        return ["type", _name(value)]
    if isinstance(value, (list, tuple)):
        return [_name(value), [observe(v, depth + 1) for v in value[:200]], len(value)]
    if isinstance(value, dict):
        items = sorted(([observe(k, depth + 1), observe(v, depth + 1)] for k, v in list(value.items())[:200]),
                       key=repr)
        return [_name(value), items, len(value)]
    if isinstance(value, (set, frozenset)):
        return [_name(value), sorted((observe(v, depth + 1) for v in list(value)[:200]), key=repr), len(value)]
    try:
        text = repr(value)
    except Exception as exc:  # noqa: BLE001 - a broken __repr__ is an observation too
        return ["repr-raised", _name(value), _name(exc)]
    return ["obj", _name(value), _ADDRESS.sub(" at 0x?", text)[:2000]]


def record(site, part, value) -> None:
    kept = RECORDS.setdefault(CURRENT[0], [])
    if len(kept) < PER_TEST:
        kept.append([f"{site}.{part}", observe(value)])


def _holds(op: str, a, b):
    try:
        if op == "==":
            return bool(a == b)
        if op == "is":
            return a is b
        if op == "in":
            return bool(a in b)
        if op == "<":
            return bool(a < b)
        if op == ">":
            return bool(a > b)
        if op == "count":
            return sorted(map(repr, a)) == sorted(map(repr, b))
    except Exception as exc:  # noqa: BLE001
        return ["raised", _name(exc)]
    return ["op", op]


def compare(site, ops, *operands) -> None:
    """A comparison: each operand that is not a dropped literal, and each comparison between two of them."""
    ops = ops.split(",")
    lone = "l" if any(v is LIT for v in operands) else "v"  # "l": compared with a literal the sandbox never saw
    for i, value in enumerate(operands):
        if value is not LIT:
            if ops[0] == "count":
                try:
                    value = sorted(map(repr, value))
                except Exception:  # noqa: BLE001
                    pass
            record(site, f"{lone}{i}", value)
    for i, op in enumerate(ops):
        a, b = operands[i], operands[i + 1]
        if a is not LIT and b is not LIT:
            record(site, f"c{i}", _holds(op, a, b))


def truth(site, value) -> None:
    try:
        record(site, "t", bool(value))
    except Exception as exc:  # noqa: BLE001
        record(site, "t", ["raised", _name(exc)])


def regex(site, text, pattern) -> None:
    """Whether the text matches, and the text itself ("r"): the pattern is in the sandbox, the exact
    text the fixed release writes is not."""
    try:
        record(site, "t", re.search(pattern, text) is not None)
    except Exception as exc:  # noqa: BLE001
        record(site, "t", ["raised", _name(exc)])
    record(site, "r", text)


def almost(site, first, second, places=None, delta=None) -> None:
    if first is not LIT and second is not LIT:
        try:
            diff = abs(first - second)
            record(site, "c", diff <= delta if delta is not None else round(diff, 7 if places is None else places) == 0)
        except Exception as exc:  # noqa: BLE001
            record(site, "c", ["raised", _name(exc)])
    lone = "l" if first is LIT or second is LIT else "v"
    for i, value in enumerate((first, second)):
        if value is not LIT:
            try:
                value = round(value, 7 if places is None else places) if delta is None else value
            except Exception:  # noqa: BLE001
                pass
            record(site, f"{lone}{i}", value)


class raises:
    """`with pytest.raises(...)` / `self.assertRaises(...)`: records the exception type (or None) and
    swallows it; offers what the tests read from pytest's ExceptionInfo and unittest's context."""

    def __init__(self, site, match=None):
        self.site, self.pattern = site, match
        self.value = self.exception = self.type = None
        self.typename = None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        self.value = self.exception = value
        self.type = kind
        self.typename = kind.__name__ if kind else None
        record(self.site, "x", ["type", _name(kind)] if kind else None)
        if self.pattern is not None and value is not None:
            regex(self.site, str(value), self.pattern)
        return kind is not None and issubclass(kind, Exception)

    def match(self, pattern) -> bool:
        regex(self.site, str(self.value), pattern)
        return True


def call_raises(site, func, *args, **kwargs):
    with raises(site):
        func(*args, **kwargs)


class warns:
    """`with pytest.warns(...)` / `self.assertWarns(...)`: records the categories of the warnings."""

    def __init__(self, site):
        self.site = site
        self._catch = warnings.catch_warnings(record=True)

    def __enter__(self):
        self.list = self._catch.__enter__()
        warnings.simplefilter("always")
        return self.list

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)
        record(self.site, "w", sorted({_name(w.category) for w in self.list}))
        return False


def mock(site, kind, target) -> None:
    """`m.assert_called_with(...)` and kin: the calls the mock saw (the expected arguments are dropped)."""
    record(site, "n", getattr(target, "call_count", None))
    if kind in ("args", "once_args"):
        record(site, "a", getattr(target, "call_args", None))
