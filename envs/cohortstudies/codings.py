"""Standard-variable conditions and how study columns encode standard variables.

Cohorts are conjunctions of conditions on the standard variables (`age >= 75 AND cognition < 24`).
A numeric standard variable's condition is a half-open interval [lo, hi); a categorical one's is
a set of level names. Every study column that measures a standard variable documents its coding
with a tag at the end of its description, the only bridge between studies:

    [standard: age = value / 12]                               numeric, a formula in `value`
    [standard: sex by code: 'M' = 'male'; 'F' = 'female']      labels -> levels or [lo, hi)
    [standard: exposure by value range: [0, 0.5) = 'none'; ...] stored number ranges -> levels

The env renders tags and encodes data with these classes; agents may parse tags with
`parse_tag` and turn a condition into SQL with `Coding.sql_condition` (None when the column
cannot resolve the condition, e.g. a Y/N carrier flag asked about two risk alleles).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Union

import numpy as np

INF = math.inf


def fmt_num(x: float) -> str:
    """Shortest readable form of a number for tags and SQL ('inf' for infinity)."""
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.10g}"


@dataclass(frozen=True)
class Interval:
    """Half-open interval [lo, hi) of a numeric standard variable."""

    lo: float = -INF
    hi: float = INF

    def subset_of(self, other: "Interval") -> bool:
        return other.lo <= self.lo and self.hi <= other.hi

    def disjoint(self, other: "Interval") -> bool:
        return self.hi <= other.lo or other.hi <= self.lo

    def contains(self, x: np.ndarray) -> np.ndarray:
        return (x >= self.lo) & (x < self.hi)

    def render(self) -> str:
        return f"[{fmt_num(self.lo)}, {fmt_num(self.hi)})"

    @classmethod
    def parse(cls, text: str) -> "Interval":
        m = re.fullmatch(r"\[\s*(-?[\w.]+)\s*,\s*(-?[\w.]+)\s*\)", text.strip())
        if not m:
            raise ValueError(f"not an interval [lo, hi): {text!r}")
        return cls(float(m.group(1)), float(m.group(2)))


#: what a condition or a code covers: an Interval (numeric variable) or a set of level names
Domain = Union[Interval, frozenset]


def covers(inner: Domain, outer: Domain) -> bool:
    return inner.subset_of(outer) if isinstance(inner, Interval) else inner <= outer


def separate(a: Domain, b: Domain) -> bool:
    return a.disjoint(b) if isinstance(a, Interval) else not (a & b)


@dataclass(frozen=True)
class Condition:
    """One condition of a cohort: `var` restricted to `domain`."""

    var: str
    domain: Domain


_COND = re.compile(r"^\s*(\w+)\s*(>=|<|=)\s*('[^']*'|-?[\d.]+)\s*$")


def parse_conditions(text: str, levels: dict[str, list[str] | None]) -> tuple[Condition, ...]:
    """`age >= 75 AND sex = 'female'` -> conditions; `levels[var]` is None for numeric variables."""
    conds = []
    for part in re.split(r"\s+AND\s+", text.strip(), flags=re.IGNORECASE):
        m = _COND.match(part)
        if not m or m.group(1) not in levels:
            raise ValueError(f"cannot read condition {part!r} (variables: {', '.join(levels)})")
        var, op, raw = m.groups()
        lv = levels[var]
        value = raw.strip("'")
        if lv is None:
            x = float(value)
            if op == "=":
                raise ValueError(f"use < and >= for the numeric variable {var}")
            conds.append(Condition(var, Interval(x, INF) if op == ">=" else Interval(-INF, x)))
            continue
        if op == "=":
            if value not in lv:
                raise ValueError(f"{var} has levels {lv}, not {value!r}")
            conds.append(Condition(var, frozenset([value])))
        else:  # ordered comparison on numeric levels (risk_alleles >= 1)
            x = float(value)
            keep = [v for v in lv if (float(v) >= x if op == ">=" else float(v) < x)]
            conds.append(Condition(var, frozenset(keep)))
    merged: dict[str, Domain] = {}
    for c in conds:  # `age >= 65 AND age < 75` -> one interval
        if c.var in merged:
            d = merged[c.var]
            merged[c.var] = (Interval(max(d.lo, c.domain.lo), min(d.hi, c.domain.hi))
                             if isinstance(d, Interval) else d & c.domain)
        else:
            merged[c.var] = c.domain
    return tuple(Condition(v, d) for v, d in merged.items())


def sql_literal(label) -> str:
    if isinstance(label, bool):
        return "true" if label else "false"
    if isinstance(label, (int, float)):
        return fmt_num(float(label)) if not float(label).is_integer() else str(int(label))
    return "'" + str(label).replace("'", "''") + "'"


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _render_target(target: Domain) -> str:
    if isinstance(target, Interval):
        return target.render()
    return " or ".join(f"'{v}'" if not _is_number(v) else v for v in sorted(target))


def _is_number(text: str) -> bool:
    return re.fullmatch(r"-?\d+(\.\d+)?", str(text)) is not None


def _parse_target(text: str) -> Domain:
    text = text.strip()
    if text.startswith("["):
        return Interval.parse(text)
    return frozenset(p.strip().strip("'") for p in text.split(" or "))


def _resolve(entries, domain: Domain) -> list | None:
    """Keys whose target lies inside `domain`; None if a target straddles it (not resolvable)."""
    inside = []
    for key, target in entries:
        if type(target) is not type(domain):
            return None
        if covers(target, domain):
            inside.append(key)
        elif not separate(target, domain):
            return None
    return inside


# ---------------------------------------------------------------------------- codings
@dataclass(frozen=True)
class NumericCoding:
    """standard = value x scale + offset, value / divisor, or 1 / value (inverse)."""

    var: str
    scale: float = 1.0
    offset: float = 0.0
    divisor: float | None = None
    inverse: bool = False

    def to_standard(self, value: np.ndarray) -> np.ndarray:
        if self.inverse:
            return 1.0 / value
        if self.divisor:
            return value / self.divisor
        return value * self.scale + self.offset

    def from_standard(self, x: np.ndarray) -> np.ndarray:
        if self.inverse:
            return 1.0 / x
        if self.divisor:
            return x * self.divisor
        return (x - self.offset) / self.scale

    def formula(self) -> str:
        if self.inverse:
            return "1 / value"
        if self.divisor:
            return f"value / {fmt_num(self.divisor)}"
        if self.scale == -1:
            return f"{fmt_num(self.offset)} - value"
        out = "value" if self.scale == 1 else f"value x {fmt_num(self.scale)}"
        if self.offset:
            out += f" {'+' if self.offset > 0 else '-'} {fmt_num(abs(self.offset))}"
        return out

    def tag(self) -> str:
        return f"[standard: {self.var} = {self.formula()}]"

    def sql_condition(self, column: str, domain: Domain) -> str | None:
        if not isinstance(domain, Interval):  # numeric levels (risk_alleles) stored as numbers
            if not all(_is_number(v) for v in domain):
                return None
            values = sorted(float(self.from_standard(np.float64(float(v)))) for v in domain)
            return f"{quote_ident(column)} IN ({', '.join(sql_literal(v) for v in values)})" if values else "false"
        # value bounds for lo and hi; a decreasing map flips which side is open
        decreasing = self.inverse or (not self.divisor and self.scale < 0)
        col, parts = quote_ident(column), []
        for bound, is_lo in ((domain.lo, True), (domain.hi, False)):
            if math.isinf(bound) or (self.inverse and bound <= 0):
                continue
            v = fmt_num(float(self.from_standard(np.float64(bound))))
            if is_lo:
                parts.append(f"{col} <= {v}" if decreasing else f"{col} >= {v}")
            else:
                parts.append(f"{col} > {v}" if decreasing else f"{col} < {v}")
        return " AND ".join(parts) if parts else f"{col} IS NOT NULL"


@dataclass(frozen=True)
class CodeCoding:
    """Stored labels, each standing for a set of levels or a value range of the standard variable."""

    var: str
    codes: tuple[tuple[object, Domain], ...]

    def tag(self) -> str:
        items = "; ".join(f"{sql_literal(label)} = {_render_target(t)}" for label, t in self.codes)
        return f"[standard: {self.var} by code: {items}]"

    def sql_condition(self, column: str, domain: Domain) -> str | None:
        inside = _resolve(self.codes, domain)
        if not inside:
            return inside if inside is None else "false"
        return f"{quote_ident(column)} IN ({', '.join(sql_literal(x) for x in inside)})"


@dataclass(frozen=True)
class RangeCoding:
    """A stored number whose value ranges [lo, hi) stand for levels of a categorical variable."""

    var: str
    ranges: tuple[tuple[Interval, frozenset], ...]

    def tag(self) -> str:
        items = "; ".join(f"{r.render()} = {_render_target(t)}" for r, t in self.ranges)
        return f"[standard: {self.var} by value range: {items}]"

    def sql_condition(self, column: str, domain: Domain) -> str | None:
        inside = _resolve(self.ranges, domain)
        if not inside:
            return inside if inside is None else "false"
        col, parts = quote_ident(column), []
        for rng in inside:
            bounds = [f"{col} >= {fmt_num(rng.lo)}" if not math.isinf(rng.lo) else "",
                      f"{col} < {fmt_num(rng.hi)}" if not math.isinf(rng.hi) else ""]
            parts.append("(" + " AND ".join(b for b in bounds if b) + ")")
        return " OR ".join(parts)


Coding = Union[NumericCoding, CodeCoding, RangeCoding]


def interval_from_pair(pair) -> Interval:
    """[lo, hi] of the task spec (None: no bound) -> Interval."""
    lo, hi = pair
    return Interval(-INF if lo is None else float(lo), INF if hi is None else float(hi))


def coding_from_spec(var: str, kind: dict, categorical: bool) -> Coding:
    """A column's coding from the task spec's `coding` block (numeric, codes or ranges)."""
    if "numeric" in kind:
        k = kind["numeric"]
        return NumericCoding(var, float(k.get("scale", 1.0)), float(k.get("offset", 0.0)), k.get("divisor"),
                             bool(k.get("inverse", False)))
    if "codes" in kind:
        if categorical:
            return CodeCoding(var, tuple((label, frozenset(str(t) for t in (target if isinstance(target, list) else [target])))
                                         for label, target in kind["codes"].items()))
        return CodeCoding(var, tuple((label, interval_from_pair(target)) for label, target in kind["codes"].items()))
    return RangeCoding(var, tuple((interval_from_pair(r), frozenset([str(level)])) for level, r in kind["ranges"].items()))

_TAG = re.compile(r"\[standard:\s*(\w+)\s+(=|by code:|by value range:)\s*(.*?)\]\s*$", re.DOTALL)
_FORMULAS = [
    (re.compile(r"^value$"), lambda m: {}),
    (re.compile(r"^1 / value$"), lambda m: {"inverse": True}),
    (re.compile(r"^value / ([\d.]+)$"), lambda m: {"divisor": float(m.group(1))}),
    (re.compile(r"^(-?[\d.]+) - value$"), lambda m: {"scale": -1.0, "offset": float(m.group(1))}),
    (re.compile(r"^value x (-?[\d.]+)(?: ([+-]) ([\d.]+))?$"),
     lambda m: {"scale": float(m.group(1)),
                "offset": (float(m.group(3)) * (1 if m.group(2) == "+" else -1)) if m.group(2) else 0.0}),
    (re.compile(r"^value ([+-]) ([\d.]+)$"),
     lambda m: {"offset": float(m.group(2)) * (1 if m.group(1) == "+" else -1)}),
]


def _split_label(entry: str) -> tuple[object, Domain]:
    """`'e3/e4' = 1` -> ('e3/e4', {'1'}); a bare number label becomes a number."""
    entry = entry.strip()
    if entry.startswith("'"):
        end = entry.index("'", 1)
        label, rest = entry[1:end], entry[end + 1:]
    else:
        label, _, rest = entry.partition(" ")
        label = float(label) if "." in label else int(label)
    return label, _parse_target(rest.strip().removeprefix("=").strip())


def parse_tag(description: str) -> Coding | None:
    """The coding documented by a column description's [standard: ...] tag (None if untagged)."""
    m = _TAG.search(description)
    if not m:
        return None
    var, kind, body = m.group(1), m.group(2), m.group(3).strip()
    if kind == "=":
        for pattern, make in _FORMULAS:
            fm = pattern.match(body)
            if fm:
                return NumericCoding(var, **make(fm))
        raise ValueError(f"unknown formula {body!r}")
    entries = [e for e in body.split(";") if e.strip()]
    if kind == "by code:":
        return CodeCoding(var, tuple(_split_label(e) for e in entries))
    ranges = []
    for e in entries:
        rng, _, target = e.partition("=")
        ranges.append((Interval.parse(rng), _parse_target(target)))
    return RangeCoding(var, tuple(ranges))
