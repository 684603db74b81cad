"""Scripted agents for CohortStudies-v4: the reference (learns across studies) and the oracle.

CohortReference works only from what the tools show. Per instance it reads the standard
variables and cohorts from the first observation, maps the study's columns to standard
variables through the [standard: ...] tags of the column descriptions (stateful, it remembers
the last tag seen for each column name and uses it for a column that comes without one, as the
consortium's data dictionary would; a new tag for a known name replaces the old one), and asks
estimate_survival_by_group (12 expressions per call) for the Kaplan-Meier survival of the whole
study, of every standard condition the study can resolve, and of every cohort's resolvable
conditions together. Then it reports:

- stateless (a fresh agent), a single-study analysis: per cohort, a logit model (the overall KM
  plus each resolvable condition's effect on it, shrunk by the condition's size and damped by
  `damp` when several add up) and the KM of the cohort's resolvable conditions together shrunk
  towards that model with a prior worth `model_patients` patients. A cohort with conditions the
  study does not measure gets the estimate of the conditions it does measure (the overall KM
  when there are none). Every estimate is shifted by `design_shift` in logit where the study's
  design states a textbook selection bias (`selection_direction`: clinic referrals are sicker than
  their population; volunteers, workers and samples that leave out long-term care healthier);
  0.15 is the best of 0, 0.15, 0.3 and 0.45 on the train split;
- stateful: it also remembers every cohort earlier studies observed whole (estimate, patients,
  region) and pools them: a weighted logit average over earlier studies (each study about
  equally, whatever its size, so their different enrollment biases average out; studies of the
  same region `same_region` times as much). A cohort this study observes whole is shrunk towards
  the pooled estimate with a prior worth `prior_patients` patients; one it observes only in part
  takes the pooled estimate.
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


#: words of a study's design and enrollment that say its patients are sicker (+1) or healthier (-1) than
#: the population it samples: clinic referrals; volunteers, workers, people in long-term care left out
_SICKER = re.compile(r"\breferr", re.IGNORECASE)
_HEALTHIER = re.compile(r"\b(volunteer|employee|worker|not approached|community-dwelling)", re.IGNORECASE)


def selection_direction(metadata: str) -> int:
    """+1 when the design says the sample is sicker than its population (its survival is too low), -1
    when healthier, 0 when it says neither: the textbook selection biases a study's design reveals."""
    text = " ".join(line for line in metadata.splitlines() if line.startswith(("Design:", "Enrollment:")))
    return int(bool(_SICKER.search(text))) - int(bool(_HEALTHIER.search(text)))


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

    def __init__(self, card, seed: int = 0, latent=None, min_patients: int = 25, prior_patients: float = 150.0,
                 same_region: float = 3.0, model_patients: float = 60.0, single_patients: float = 30.0,
                 damp: float = 0.6, design_shift: float = 0.15, freeze_at: int | None = None):
        super().__init__(card, seed=seed)
        self.min_patients = int(min_patients)
        self.prior_patients = float(prior_patients)
        self.same_region = float(same_region)
        self.model_patients = float(model_patients)
        self.single_patients = float(single_patients)
        self.damp = float(damp)
        self.design_shift = float(design_shift)
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
        self.plan: dict[str, tuple[list[str], str | None, bool]] = {}
        self.shift = 0.0

    def act(self, observation: str, info: dict) -> str:
        if self.phase == "start":
            self.phase = "metadata"
            return json.dumps({"tool": "get_database_metadata", "arguments": {}})
        if self.phase == "metadata":
            self.shift = self.design_shift * selection_direction(observation)
            self.seen_tags = {k: v for k, v in column_tags(observation).items() if v}
            self.pending = self._expressions(parse_columns(observation, self.tags))
            self.phase = "estimates"
        else:
            self.estimates.update(parse_km(observation))
        if self.pending and info.get("steps_left", 0) > 1:
            batch, self.pending = self.pending[:BATCH], self.pending[BATCH:]
            return json.dumps({"tool": "estimate_survival_by_group", "arguments": {"group_expressions": batch}})
        return self._submit()

    def end_instance(self, reward: float, info: dict, observation: str = "") -> None:
        if self.frozen(info):
            return
        self.tags.update(self.seen_tags)
        for cid, (n, est) in self._full_estimates().items():
            self.memory.setdefault(cid, []).append({"n": n, "km": est, "study": self.study, "region": self.region})

    # ------------------------------------------------------------------ the study's own analysis
    def _expressions(self, columns: dict) -> list[str]:
        """'all', one CASE per standard condition the study's columns resolve (labelled by the condition)
        and one per cohort's resolvable conditions together (labelled by the cohort). `self.plan` keeps,
        per cohort, its resolvable conditions, the label of their conjunction and whether that is the
        whole cohort."""
        exprs, singles = ["'all'"], {}
        self.plan = {}
        for cid, text in self.cohort_texts.items():
            conds, parts, whole = [], [], True
            for cond in parse_conditions(text, self.levels):
                sql = None
                if cond.var in columns:
                    column, coding = columns[cond.var]
                    sql = coding.sql_condition(column, cond.domain)
                if sql is None or sql == "false":
                    whole = False
                    continue
                key = _condition_key(cond)
                if key not in singles:
                    singles[key] = sql
                    exprs.append(f"CASE WHEN {sql} THEN {_quote(key)} END")
                conds.append(key)
                parts.append(f"({sql})")
            label = None
            if len(conds) > 1:
                label = cid
                exprs.append(f"CASE WHEN {' AND '.join(parts)} THEN '{cid}' END")
            elif conds:
                label = conds[0]
            self.plan[cid] = (conds, label, whole)
        return exprs

    def _km(self, label: str | None) -> tuple[int, np.ndarray] | None:
        """(patients, logit KM) of a group, if it has enough patients and every time point."""
        n, surv = self.estimates.get(label, (0, [None]))
        if n < self.min_patients or None in surv:
            return None
        return n, _logit(surv)

    def _study_estimate(self, cid: str, overall: np.ndarray) -> tuple[np.ndarray, int, bool]:
        """The study's own logit estimate of a cohort from its resolvable conditions: each condition's
        effect on the overall KM (shrunk by its size), added up (damped, as conditions overlap), and
        the conjunction's KM shrunk towards that sum. Returns (estimate, patients, whole cohort)."""
        conds, label, whole = self.plan.get(cid, ([], None, False))
        model, effects = overall.copy(), []
        for key in conds:
            got = self._km(key)
            if got is not None:
                n, lk = got
                effects.append(n / (n + self.single_patients) * (lk - overall))
        if effects:
            model = overall + (effects[0] if len(effects) == 1 else self.damp * np.sum(effects, axis=0))
        got = self._km(label)
        if got is None:
            return model + self.shift, 0, False
        n, lk = got
        if len(conds) == 1:  # the model is that one condition's (shrunk) KM
            return model + self.shift, n, whole
        return (n * lk + self.model_patients * model) / (n + self.model_patients) + self.shift, n, whole

    def _overall(self) -> np.ndarray:
        got = self._km("all")
        return got[1] if got is not None else np.zeros(3)  # no estimate: uninformative 0.5

    def _full_estimates(self) -> dict[str, tuple[int, list[float]]]:
        """Cohorts this study observes whole: (patients, survival estimate), for the memory."""
        overall, out = self._overall(), {}
        for cid in self.cohort_texts:
            est, n, whole = self._study_estimate(cid, overall)
            if whole and n >= self.min_patients:
                out[cid] = (n, [float(x) for x in _expit(est)])
        return out

    # ------------------------------------------------------------------ what earlier studies showed
    def _pooled(self, cid: str) -> np.ndarray | None:
        past = self.memory.get(cid, [])
        if not past:
            return None
        # each study counts about equally whatever its size; the same region counts more
        w = np.array([p["n"] / (p["n"] + 50.0) * (self.same_region if p["region"] == self.region else 1.0)
                      for p in past])
        return w @ np.array([_logit(p["km"]) for p in past]) / w.sum()

    def _submit(self) -> str:
        overall = self._overall()
        report = {}
        for cid in self.cohort_texts:
            est, n, whole = self._study_estimate(cid, overall)
            pooled = self._pooled(cid)
            if pooled is not None:
                # a whole cohort's own estimate is worth its patients; a partial one is replaced
                est = (n * est + self.prior_patients * pooled) / (n + self.prior_patients) if whole else pooled
            report[cid] = [round(float(x), 6) for x in _expit(est)]
        return json.dumps({"tool": "submit_cohort_report", "arguments": {"survival": report}})

    def state_dict(self) -> dict:
        return {"memory": self.memory, "tags": self.tags}

    def load_state_dict(self, state: dict) -> None:
        self.memory = {k: list(v) for k, v in state["memory"].items()}
        self.tags = dict(state.get("tags", {}))


def _condition_key(cond) -> str:
    """A short label naming one standard condition (a group label in KM output)."""
    d = cond.domain
    if hasattr(d, "lo"):
        return f"{cond.var} in [{d.lo:g}, {d.hi:g})"
    return f"{cond.var} in {{{', '.join(sorted(d))}}}"


def _quote(label: str) -> str:
    return "'" + label.replace("'", "''") + "'"


class CohortOracle(Agent):
    """Reports the true population survival of every cohort (privileged)."""

    name = "oracle"
    deterministic = True  # plays from its observations only: one stateless pass measures it
    privileged = True

    def act(self, observation: str, info: dict) -> str:
        truth = self.latent["truth"][info["instance_id"]]
        return json.dumps({"tool": "submit_cohort_report", "arguments": {"survival": truth}})
