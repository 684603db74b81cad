"""Scripted agents for CohortStudies-v1: the reference (learns across studies) and the oracle.

CohortReference works only from what the tools show. Per instance it reads the standard
variables and cohorts from the first observation, maps the study's columns to standard
variables through the [standard: ...] tags of the column descriptions (stateful, it remembers
the last tag seen for each column name and uses it for a column that comes without one, as the
consortium's data dictionary would; a new tag for a known name replaces the old one), turns
every cohort it can resolve into a CASE expression and asks estimate_survival_by_group for
Kaplan-Meier estimates (12 expressions per call), then reports:

- stateless (a fresh agent): the in-study KM where the cohort is observable (at least
  `min_patients` patients and estimable at every time point), the study's overall KM elsewhere;
- stateful: it remembers every cohort estimate of earlier studies (KM, patients, region) and
  pools them: a cohort's pooled estimate is a weighted logit average over earlier studies (each
  study about equally, whatever its size, so their different enrollment biases average out;
  studies of the same region `same_region` times as much). In-study KM, where available, is
  shrunk towards the pooled estimate with a prior worth `prior_patients` patients; cohorts no
  study has shown yet get the study's overall KM.
- `freeze_at=K` (for `clbench drift-check`): from position K on it stops adding studies and tags
  to its memory and keeps using what it held at K.

CohortOracle is privileged: it reports the true population survival it is handed.
"""
from __future__ import annotations

import json
import re

import numpy as np

from clbench.agent import Agent
from clbench.envs.cohortstudies.codings import parse_conditions, parse_tag

BATCH = 12


def _logit(p):
    p = np.clip(np.asarray(p, dtype=float), 1e-4, 1 - 1e-4)
    return np.log(p / (1 - p))


def _expit(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


def parse_brief(text: str) -> tuple[dict[str, list[str] | None], dict[str, str]]:
    """Standard variables (name -> levels or None) and cohorts (id -> condition text) from the first observation."""
    levels: dict[str, list[str] | None] = {}
    for m in re.finditer(r"^- (\w+) \((numeric|levels: ([^)]*))\):", text, re.MULTILINE):
        levels[m.group(1)] = None if m.group(2) == "numeric" else [
            v.strip().strip("'") for v in m.group(3).split(",")]
    cohorts = {m.group(1): m.group(2).strip() for m in re.finditer(r"^(C\d+): (.+)$", text, re.MULTILINE)}
    return levels, cohorts


def column_tags(metadata: str) -> dict[str, str | None]:
    """Column name -> its description's [standard: ...] tag (None when untagged), from the metadata."""
    out = {}
    for line in metadata.splitlines():
        if not line.startswith("- ") or line.count(" | ") < 2:
            continue
        name, _sql_type, description = line[2:].split(" | ", 2)
        m = re.search(r"\[standard:.*\]\s*$", description, re.DOTALL)
        out[name.strip()] = m.group(0).strip() if m else None
    return out


def parse_columns(metadata: str, known: dict[str, str] | None = None) -> dict[str, object]:
    """Standard variable -> (column, coding) from the metadata's column list (first column wins);
    an untagged column uses the tag `known` holds for its name."""
    out = {}
    for name, tag in column_tags(metadata).items():
        tag = tag or (known or {}).get(name)
        try:
            coding = parse_tag(tag) if tag else None
        except ValueError:
            coding = None
        if coding is not None and coding.var not in out:
            out[coding.var] = (name, coding)
    return out


def parse_km(text: str) -> dict[str, tuple[int, list[float | None]]]:
    """Group label -> (patients, [S(t) or None]) from estimate_survival_by_group output."""
    out = {}
    for line in text.splitlines():
        parts = line.rsplit(" | ", 5)
        if len(parts) != 6 or not parts[1].strip().isdigit():
            continue
        surv = [None if p.strip() == "NA" else float(p) for p in parts[3:]]
        out[parts[0].strip()] = (int(parts[1]), surv)
    return out


class CohortReference(Agent):
    name = "reference"
    deterministic = True  # plays from its observations only: one stateless pass measures it

    def __init__(self, card, seed: int = 0, latent=None, min_patients: int = 25,
                 prior_patients: float = 150.0, same_region: float = 3.0, freeze_at: int | None = None):
        super().__init__(card, seed=seed)
        self.min_patients = int(min_patients)
        self.prior_patients = float(prior_patients)
        self.same_region = float(same_region)
        self.freeze_at = freeze_at
        #: cohort id -> earlier studies' estimates {"n", "km", "study", "region"}
        self.memory: dict[str, list[dict]] = {}
        #: column name -> the last [standard: ...] tag seen for it
        self.tags: dict[str, str] = {}

    # ------------------------------------------------------------------ instance loop
    def begin_instance(self, observation: str, info: dict) -> None:
        self.levels, self.cohort_texts = parse_brief(observation)
        self.pending: list[str] = []
        self.estimates: dict[str, tuple[int, list]] = {}
        self.study = info.get("variant", "")
        m = re.search(r"region (\w+)\.", observation)
        self.region = m.group(1) if m else ""
        self.phase = "start"
        self.seen_tags: dict[str, str] = {}

    def act(self, observation: str, info: dict) -> str:
        if self.phase == "start":
            self.phase = "metadata"
            return json.dumps({"tool": "get_database_metadata", "arguments": {}})
        if self.phase == "metadata":
            self.seen_tags = {k: v for k, v in column_tags(observation).items() if v}
            self.pending = self._expressions(parse_columns(observation, self.tags))
            self.phase = "estimates"
        else:
            self.estimates.update(parse_km(observation))
        if self.pending and info.get("steps_left", 0) > 1:
            batch, self.pending = self.pending[:BATCH], self.pending[BATCH:]
            return json.dumps({"tool": "estimate_survival_by_group", "arguments": {"group_expressions": batch}})
        return self._submit()

    def end_instance(self, reward: float, info: dict) -> None:
        if self.frozen(info):
            return
        self.tags.update(self.seen_tags)
        for cid, (n, km) in self._observed().items():
            self.memory.setdefault(cid, []).append({"n": n, "km": km, "study": self.study, "region": self.region})

    # ------------------------------------------------------------------ helpers
    def _expressions(self, columns: dict) -> list[str]:
        """'all' plus one CASE per cohort the study's columns can resolve."""
        exprs = ["'all'"]
        for cid, text in self.cohort_texts.items():
            parts = []
            for cond in parse_conditions(text, self.levels):
                if cond.var not in columns:
                    break
                column, coding = columns[cond.var]
                sql = coding.sql_condition(column, cond.domain)
                if sql is None or sql == "false":
                    break
                parts.append(f"({sql})")
            else:
                exprs.append(f"CASE WHEN {' AND '.join(parts)} THEN '{cid}' END")
        return exprs

    def _overall(self) -> list[float] | None:
        n, surv = self.estimates.get("all", (0, [None]))
        return surv if n and None not in surv else None

    def _observed(self) -> dict[str, tuple[int, list[float]]]:
        return {cid: (n, s) for cid, (n, s) in self.estimates.items()
                if cid in self.cohort_texts and n >= self.min_patients and None not in s}

    def _pooled(self, cid: str) -> np.ndarray | None:
        past = self.memory.get(cid, [])
        if not past:
            return None
        # each study counts about equally whatever its size; the same region counts more
        w = np.array([p["n"] / (p["n"] + 50.0) * (self.same_region if p["region"] == self.region else 1.0)
                      for p in past])
        return _expit(w @ np.array([_logit(p["km"]) for p in past]) / w.sum())

    def _submit(self) -> str:
        overall = self._overall()
        base = np.array(overall if overall is not None else [0.5, 0.5, 0.5])  # no estimate: uninformative
        observed = self._observed()
        report = {}
        for cid in self.cohort_texts:
            pooled = self._pooled(cid)
            if cid in observed:
                n, km = observed[cid]
                est = np.array(km, dtype=float)
                if pooled is not None:
                    est = (n * est + self.prior_patients * pooled) / (n + self.prior_patients)
            else:
                est = pooled if pooled is not None else base
            report[cid] = [round(float(x), 6) for x in np.clip(est, 0.0, 1.0)]
        return json.dumps({"tool": "submit_cohort_report", "arguments": {"survival": report}})

    def state_dict(self) -> dict:
        return {"memory": self.memory, "tags": self.tags}

    def load_state_dict(self, state: dict) -> None:
        self.memory = {k: list(v) for k, v in state["memory"].items()}
        self.tags = dict(state.get("tags", {}))


class CohortOracle(Agent):
    """Reports the true population survival of every cohort (privileged)."""

    name = "oracle"
    deterministic = True  # plays from its observations only: one stateless pass measures it
    privileged = True

    def act(self, observation: str, info: dict) -> str:
        truth = self.latent["truth"][info["instance_id"]]
        return json.dumps({"tool": "submit_cohort_report", "arguments": {"survival": truth}})
