"""Studies: biased samples of the latent population, measured, named and coded their own way.

A study instance is (study, region, seed). Building it samples the region's population,
enrolls patients with the study's criteria (stated) and type-dependent participation (not
stated), follows them up with staggered administrative censoring and random dropout, encodes
the measured standard variables with the study's codings, adds distractor columns and missing
values, and returns the agent-visible patients table. The latent type and the true survival
time never enter the table.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from clbench.envs.cohortstudies.codings import (CodeCoding, Coding, NumericCoding, coding_from_spec, fmt_num,
                                                interval_from_pair)
from clbench.envs.cohortstudies.population import Population


@dataclass(frozen=True)
class Column:
    """A study column measuring a standard variable."""

    name: str
    var: str
    coding: Coding
    text: str
    missing: float = 0.0
    decimals: int | None = None
    floor: bool = False
    pick: dict | None = None  # label weights when several labels share a target
    draw: dict | None = None  # level -> [lo, hi] of stored values (range codings)
    documented: bool = True  # False: no tag (coded as an earlier study's tag said)

    @classmethod
    def from_spec(cls, spec: dict, pop: Population) -> "Column":
        kind = spec["coding"]
        coding = coding_from_spec(spec["var"], kind, pop.variables[spec["var"]].levels is not None)
        extra = {}
        if "numeric" in kind:
            extra = {"decimals": kind["numeric"].get("decimals"), "floor": bool(kind["numeric"].get("floor", False))}
        elif "codes" in kind:
            extra = {"pick": kind.get("pick")}
        else:
            extra = {"draw": {str(k): v for k, v in kind["draw"].items()}}
        return cls(spec["name"], spec["var"], coding, spec["text"], float(spec.get("missing", 0.0)),
                   documented=bool(spec.get("documented", True)), **extra)

    @property
    def description(self) -> str:
        return f"{self.text} {self.coding.tag()}" if self.documented else self.text

    def encode(self, values: np.ndarray, pop: Population, rng: np.random.Generator) -> pd.Series:
        """Stored values for the standard values of the enrolled patients."""
        n = len(values)
        if isinstance(self.coding, NumericCoding):
            x = values.astype(float)
            v = self.coding.from_standard(x)
            scale = 10.0 ** (self.decimals or 0)
            v = np.floor(v * scale + 1e-9) / scale if self.floor else np.round(v, self.decimals or 0)
            out = pd.Series(v.astype(np.int64) if self.decimals == 0 else v)
        elif isinstance(self.coding, CodeCoding):
            labels = np.full(n, None, dtype=object)
            groups: dict = {}
            for label, target in self.coding.codes:
                groups.setdefault(target, []).append(label)
            for target, group in groups.items():  # `pick` weights labels that share a target
                mask = pop.in_domain(values, target) & pd.isna(labels)
                w = np.array([(self.pick or {}).get(g, 1.0) for g in group], dtype=float)
                labels[mask] = np.asarray(group, dtype=object)[
                    rng.choice(len(group), size=int(mask.sum()), p=w / w.sum())]
            if pd.isna(labels).any():
                raise ValueError(f"column {self.name}: some standard values have no code")
            out = pd.Series(labels)
        else:
            v = np.zeros(n)
            for level, (lo, hi) in self.draw.items():
                mask = values.astype(str) == level
                v[mask] = np.round(rng.uniform(lo, hi, size=int(mask.sum())), 2)
            out = pd.Series(v)
        return _with_missing(out, self.missing, rng)


def _with_missing(series: pd.Series, share: float, rng: np.random.Generator) -> pd.Series:
    mask = rng.random(len(series)) < share
    if not mask.any():
        return series
    if pd.api.types.is_integer_dtype(series):
        series = series.astype("Int64")
    series[mask] = None
    return series


def _distractor(spec: dict, n: int, rng: np.random.Generator) -> pd.Series:
    kind = spec["kind"]
    if kind == "choice":
        return pd.Series(np.asarray(spec["values"], dtype=object)[rng.integers(len(spec["values"]), size=n)])
    if kind == "integer":
        return pd.Series(rng.integers(spec["low"], spec["high"] + 1, size=n))
    v = np.round(rng.normal(spec["mean"], spec["sd"], size=n), spec.get("decimals", 1))
    return pd.Series(v.astype(np.int64) if spec.get("decimals", 1) == 0 else v)


@dataclass
class StudyData:
    """One built study instance: the agent-visible table plus follow-up in months (env side)."""

    table: pd.DataFrame
    months: np.ndarray  # observed follow-up in months, as stored (rounded) in the table
    events: np.ndarray  # death observed


class Study:
    """A study design from the task spec: enrollment, follow-up, columns and codings."""

    def __init__(self, spec: dict, pop: Population):
        self.spec = spec
        self.pop = pop
        self.name = spec["name"]
        self.columns = [Column.from_spec(c, pop) for c in spec["columns"]]
        self.criteria = {v: interval_from_pair(r) for v, r in spec.get("criteria", {}).items()}
        self.weights = np.asarray(spec["type_weights"], dtype=float)
        self.time = spec["time"]
        self.event = spec["event"]

    @property
    def measured(self) -> set[str]:
        return {c.var for c in self.columns}

    def enroll(self, rng: np.random.Generator, region: str) -> dict[str, np.ndarray]:
        """Sample the region until enough patients pass the criteria and participate."""
        n, parts, got = int(self.spec["patients"]), [], 0
        accept_p = self.weights / self.weights.max()
        while got < n:
            batch = self.pop.sample(rng, region, 3 * n)
            keep = rng.random(3 * n) < accept_p[batch["type"]]
            for var, interval in self.criteria.items():
                keep &= self.pop.in_domain(batch[var], interval)
            parts.append({k: v[keep] for k, v in batch.items()})
            got += int(keep.sum())
        return {k: np.concatenate([p[k] for p in parts])[:n] for k in parts[0]}

    def build(self, region: str, seed: int) -> StudyData:
        rng = np.random.default_rng(seed)
        pat = self.enroll(rng, region)
        n = len(pat["type"])
        lo, hi = self.spec["followup_months"]
        admin = rng.uniform(lo, hi, size=n)
        rate = -np.log1p(-float(self.spec["dropout_per_year"])) / 12.0
        dropout = rng.exponential(1.0 / rate, size=n)
        censor = np.minimum(admin, dropout)
        events = pat["months"] <= censor
        observed = np.minimum(pat["months"], censor)
        per_month, dec = float(self.time["per_month"]), int(self.time["decimals"])
        stored = np.maximum(np.round(observed * per_month, dec), 10.0 ** -dec)
        table = {self.spec["id_column"]["name"]: rng.choice(np.arange(10_000, 100_000), size=n, replace=False),
                 self.time["column"]: stored.astype(np.int64) if dec == 0 else stored,
                 self.event["column"]: np.where(events, self.event["dead"], self.event["alive"])}
        for col in self.columns:
            table[col.name] = col.encode(pat[col.var], self.pop, rng)
        for d in self.spec.get("distractors", []):
            table[d["name"]] = _distractor(d, n, rng)
        df = pd.DataFrame({k: (v.reset_index(drop=True) if isinstance(v, pd.Series) else v) for k, v in table.items()})
        return StudyData(df, stored / per_month, events)

    def column_texts(self) -> dict[str, str]:
        """Agent-visible description of every column, in table order."""
        t, e = self.time, self.event
        texts = {self.spec["id_column"]["name"]: self.spec["id_column"]["text"],
                 t["column"]: f"{t['text']} Unit: {t['unit']}" + (
                     "" if t["unit"] == "months" else f" (1 month = {fmt_num(float(t['per_month']))} {t['unit']})") + ".",
                 e["column"]: e["text"]}
        texts.update({c.name: c.description for c in self.columns})
        texts.update({d["name"]: d["text"] for d in self.spec.get("distractors", [])})
        return texts


def write_database(table: pd.DataFrame, path: Path) -> None:
    """Write the patients table to a DuckDB file (via a temp file renamed into place)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(suffix=".duckdb", dir=path.parent)
    os.close(fd)
    os.unlink(tmp)  # DuckDB must create the file itself
    con = duckdb.connect(tmp)
    try:
        con.register("patients_df", table)
        con.execute("CREATE TABLE patients AS SELECT * FROM patients_df")
    finally:
        con.close()
    os.replace(tmp, path)
