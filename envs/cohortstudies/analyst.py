"""An analytic model of the reference on a world, cheap enough to judge a world at draw time.

No data is drawn: each Kaplan-Meier estimate the reference (agents/cohortstudies.py) would ask a
study for is replaced by the exact survival of the patients that study enrolls in that group (its
region's type mix times its enrollment bias, within its criteria; patients with a missing value
left out), and the reference's own arithmetic is applied to them: each resolvable condition's shrunk
effect on the overall survival, the conjunction shrunk towards their damped sum, groups under its
minimum size dropped, the design's logit step, and when stateful, whole cohorts of earlier studies
pooled as it pools them, an untagged column read with the last tag it knows for that name (so the
reference frozen before a re-coding selects the patients the old coding names). A world costs a
few tenths of a second instead of played rollouts. Three measures come out, each a share of the
world's room to learn:

- `reference_share`: the stateless reference's mean gain as a share of r_max;
- `drift_share`: the drift cost (unfrozen minus frozen before the re-coding, over the re-coding
  study through the study that relies on the new coding) per unit of headroom r_max - r_reference;
- `gain`: the stateful reference's normalized gain.

Checked against the played reference (two rollouts, as clbench drift-check plays it) on the
canonical world and fresh worlds 1-20: the model's reference share reads 0.02-0.08 above the played
one (sampled tables carry noise the exact ones do not), its drift share 0.92-1.3x the played one,
its normalized gain within 0.04 of it in 17 of 21 worlds (0.404 against 0.403 in the canonical
world; at most 0.18 above, in one world). Per instance the modelled drift cost matched the played
one to about 0.001 bits where checked.

Nothing here is shown to agents.
"""
from __future__ import annotations

import functools

import numpy as np

from clbench.envs.cohortstudies.codings import Coding, Interval, NumericCoding, coding_from_spec
from clbench.envs.cohortstudies.population import Population
from clbench.envs.cohortstudies.scoring import binary_kl_bits, information_gain_bits

#: the reference's logit step for a design-stated selection bias, its shrinkage and prior weights
#: (agents/cohortstudies.py CohortReference defaults)
DESIGN_SHIFT, PRIOR_PATIENTS, SAME_REGION, MIN_PATIENTS = 0.15, 150.0, 3.0, 25
SINGLE_PATIENTS, MODEL_PATIENTS, DAMP = 30.0, 60.0, 0.6


def _meet(a, b):
    if a is None:
        return b
    return Interval(max(a.lo, b.lo), min(a.hi, b.hi)) if isinstance(a, Interval) else a & b


def _logit(p):
    p = np.clip(np.asarray(p, dtype=float), 1e-4, 1 - 1e-4)
    return np.log(p / (1 - p))


def _expit(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


class Analyst:
    """The reference's analysis of every study instance of a world, computed exactly."""

    def __init__(self, world: dict, spec: dict):
        self.pop = Population(world["population"])
        self.studies = world["studies"]
        self.points = [int(p) for p in spec["time_points_months"]]
        self.eps = float(spec["smoothing_eps"])
        self.cohorts = [self.pop.conditions(t) for t in spec["cohorts"].values()]
        self.type_survival = self.pop.type_survival(self.points)
        self._probs: dict = {}
        self._truth: dict = {}
        self._estimates: dict = {}
        self._selected = functools.cache(self._select)  # per analyst: one world's questions recur
        self.recoded()

    def recoded(self) -> None:
        """Read the studies' codings again (after a re-coding's scale changed); the population is the same."""
        self.__dict__.pop("codings", None)
        self._tags = functools.cache(self._known_tags)
        self._memory = functools.cache(self._remembered)
        self._pools: dict = {}  # keyed by id() of a memory this analyst holds (self._memory's cache)

    @functools.cached_property
    def codings(self) -> dict[tuple[str, str], Coding]:
        """(study, column) -> the column's coding."""
        levels = {name: v.levels for name, v in self.pop.variables.items()}
        return {(s["name"], c["name"]): coding_from_spec(c["var"], c["coding"], levels[c["var"]] is not None)
                for s in self.studies for c in s["columns"]}

    def probs(self, var: str, domain) -> np.ndarray:
        """P(var in domain | type), per type."""
        if (var, domain) not in self._probs:
            v = self.pop.variables[var]
            self._probs[var, domain] = np.array([v.prob(domain, k) for k in range(len(self.pop.types))])
        return self._probs[var, domain]

    def _weights(self, prior: np.ndarray, domains: dict) -> np.ndarray:
        w = prior.copy()
        for var, d in domains.items():
            w = w * self.probs(var, d)
        return w

    def _survival(self, weights: np.ndarray) -> np.ndarray:
        return (weights / weights.sum()) @ self.type_survival

    def truth(self, region: str) -> np.ndarray:
        if region not in self._truth:
            prior = self.pop.regions[region]
            self._truth[region] = np.array([self._survival(self._weights(prior, {c.var: c.domain for c in conds}))
                                            for conds in self.cohorts])
        return self._truth[region]

    def instances(self, study: dict) -> list[str]:
        return [inst["region"] for inst in study["instances"]]

    def estimates(self, study: dict, region: str, known: dict[str, Coding]) -> tuple[np.ndarray, list]:
        """(baseline, [(logit estimate, patients, whole cohort) per cohort]) of one instance as the
        reference's single-study analysis makes them (CohortReference._study_estimate: each resolvable
        condition's shrunk effect on the overall survival, damped when several add up, the conjunction
        shrunk towards that sum, groups under MIN_PATIENTS left out, the design's logit step), with
        exact enrolled survival for its Kaplan-Meier estimates. An untagged column is read with
        `known[name]` (left out when the analyst knows none)."""
        # an estimate depends on the codings only where a column is read without its own tag
        untagged = tuple((c["name"], self.codings[study["name"], c["name"]], known.get(c["name"]))
                         for c in study["columns"] if not c.get("documented", True))
        key = (study["name"], region, untagged)
        if key in self._estimates:
            return self._estimates[key]
        from clbench.agents.cohortstudies import selection_direction  # the reference's reading of a design

        shift = DESIGN_SHIFT * selection_direction(f"Design: {study['design']}\nEnrollment: {study['enrollment']}")
        criteria = {v: Interval(-np.inf if lo is None else lo, np.inf if hi is None else hi)
                    for v, (lo, hi) in study.get("criteria", {}).items()}
        prior = self.pop.regions[region] * np.asarray(study["type_weights"], dtype=float)
        enrolled = self._weights(prior, criteria)
        baseline = self._survival(enrolled)
        overall = _logit(baseline)
        columns: dict = {}
        for c in study["columns"]:
            actual = self.codings[study["name"], c["name"]]
            read = actual if c.get("documented", True) else known.get(c["name"])
            if read is not None:
                columns.setdefault(c["var"], (c["name"], actual, read, 1.0 - float(c.get("missing", 0.0))))

        # every group the analysis asks for (each resolvable condition alone, each cohort's resolvable
        # conditions together), computed at once: (cohorts, conditions) -> rows of one weights matrix
        rows: dict = {}
        plans = []
        for conds in self.cohorts:
            domains, present, singles, whole = dict(criteria), 1.0, [], True
            for cond in conds:
                got = columns.get(cond.var)
                domain = self._selected(*got[:3], cond) if got else None
                if domain is None:
                    whole = False
                    continue
                single = ((cond.var, _meet(criteria.get(cond.var), domain)),)
                singles.append(rows.setdefault((single, got[3]), len(rows)))
                domains[cond.var] = _meet(domains.get(cond.var), domain)
                present *= got[3]
            together = tuple(sorted(domains.items(), key=lambda kv: kv[0])) if singles else None
            plans.append((singles, rows.setdefault((together, present), len(rows)) if singles else None, whole))
        keys = list(rows)
        w = np.array([self._weights(prior, {**criteria, **dict(k)}) for k, _ in keys]).reshape(len(keys), len(prior))
        n = float(study["patients"]) * np.array([present for _, present in keys]) * w.sum(axis=1) / enrolled.sum()
        ok = n >= MIN_PATIENTS
        safe = np.where(ok[:, None], w, enrolled)
        logits = _logit((safe / safe.sum(axis=1, keepdims=True)) @ self.type_survival)
        out = []
        for singles, conj, whole in plans:
            effects = [n[i] / (n[i] + SINGLE_PATIENTS) * (logits[i] - overall) for i in singles if ok[i]]
            model = overall + (0.0 if not effects else effects[0] if len(effects) == 1 else DAMP * np.sum(effects, axis=0))
            if conj is None or not ok[conj]:  # no group of its own (nothing resolvable, or too few patients)
                out.append((model + shift, 0.0, False))
            elif len(singles) == 1:  # the model is that one condition's (shrunk) estimate
                out.append((model + shift, float(n[conj]), whole))
            else:
                out.append(((n[conj] * logits[conj] + MODEL_PATIENTS * model) / (n[conj] + MODEL_PATIENTS) + shift,
                            float(n[conj]), whole))
        self._estimates[key] = (baseline, out)
        return self._estimates[key]

    def _select(self, name: str, actual: Coding, read: Coding, cond):
        """Standard values a condition selects when the column is read with coding `read` (None: it
        cannot resolve the condition); a coding the column no longer has selects other values."""
        sql = read.sql_condition(name, cond.domain)
        if sql is None or sql == "false":
            return None
        if read == actual:
            return cond.domain
        if not (isinstance(cond.domain, Interval) and isinstance(read, NumericCoding)
                and isinstance(actual, NumericCoding)):
            return None
        ends = sorted(float(actual.to_standard(np.float64(read.from_standard(np.float64(x)))))
                      for x in (cond.domain.lo, cond.domain.hi))
        # a decreasing map of whole numbers: value < hi selects standard >= K - hi + 1 (rounded values)
        half = 0.5 if actual.scale < 0 and self.pop.variables[actual.var].integer else 0.0
        return Interval(ends[0] + half, ends[1] + half)

    # ------------------------------------------------------------------ the measures
    @functools.cached_property
    def _baselines(self) -> tuple[float, float]:
        best, ref = [], []
        for study in self.studies:
            for region in self.instances(study):
                truth = self.truth(region)
                baseline, est = self.estimates(study, region, {})
                best.append(float(binary_kl_bits(truth, np.broadcast_to(baseline, truth.shape), self.eps).mean()))
                ref.append(information_gain_bits(truth, baseline, _expit(np.array([e for e, _, _ in est])), self.eps))
        return float(np.mean(best)), float(np.mean(ref))

    def r_max_and_reference(self) -> tuple[float, float]:
        """Mean over instances of the truth's gain and of the stateless analyst's (no re-coding changes them)."""
        return self._baselines

    def reference_share(self) -> tuple[float, float]:
        """(the stateless reference's share of r_max, the headroom r_max - r_reference)."""
        r_max, ref = self.r_max_and_reference()
        return ref / r_max, r_max - ref

    def profile(self) -> dict[str, float]:
        """The world's difficulty as the reference meets it: `reference_share` (of r_max), `drift_share`
        (the drift cost per unit of headroom r_max - r_reference) and `gain` (the stateful reference's
        normalized gain)."""
        share, headroom = self.reference_share()
        return {"reference_share": share, "drift_share": self.drift_cost() / headroom, "gain": self.gain()}

    def gain(self) -> float:
        """The stateful reference's normalized gain: (its mean - r_reference) / (r_max - r_reference),
        each study pooling every earlier study (the reference's memory at that study's first instance)."""
        r_max, ref = self.r_max_and_reference()
        played = [self._stateful_gain(s, r, self._tags(i), self._memory(i))
                  for i, s in enumerate(self.studies) for r in self.instances(s)]
        return (float(np.mean(played)) - ref) / (r_max - ref)

    def drift_cost(self) -> float:
        untagged = [(i, c["name"]) for i, s in enumerate(self.studies) for c in s["columns"]
                    if not c.get("documented", True)]
        if not untagged:
            return 0.0
        last, name = untagged[0]
        first = next(self.codings[s["name"], name] for s in self.studies for c in s["columns"] if c["name"] == name)
        recode = next(i for i, s in enumerate(self.studies) for c in s["columns"]
                      if c["name"] == name and self.codings[s["name"], name] != first)
        frozen = (self._tags(recode), self._memory(recode))
        costs = []
        for i in range(recode, last + 1):
            study = self.studies[i]
            for region in self.instances(study):
                costs.append(self._stateful_gain(study, region, self._tags(i), self._memory(i))
                             - self._stateful_gain(study, region, *frozen))
        return float(np.mean(costs))

    def _known_tags(self, upto: int) -> dict[str, Coding]:
        """The last documented coding of each column name in the studies before `upto`."""
        return {c["name"]: self.codings[s["name"], c["name"]] for s in self.studies[:upto] for c in s["columns"]
                if c.get("documented", True)}

    def _remembered(self, upto: int) -> dict[int, list]:
        """Per cohort, the whole-cohort estimates of the studies before `upto` (as the reference remembers them)."""
        memory: dict[int, list] = {}
        for i, study in enumerate(self.studies[:upto]):
            for region in self.instances(study):
                for k, (est, n, whole) in enumerate(self.estimates(study, region, self._tags(i))[1]):
                    if whole and n >= MIN_PATIENTS:
                        memory.setdefault(k, []).append((est, n, region))
        return memory

    def _stateful_gain(self, study: dict, region: str, known: dict, memory: dict) -> float:
        """The stateful reference's gain on one instance: its own estimate of a whole cohort shrunk
        towards what earlier studies showed (PRIOR_PATIENTS), a partial one replaced by it."""
        baseline, est = self.estimates(study, region, known)
        report = []
        for k, (e, n, whole) in enumerate(est):
            past = memory.get(k)
            if past:
                pooled = self._pooled(id(memory), k, region, memory)
                e = (n * e + PRIOR_PATIENTS * pooled) / (n + PRIOR_PATIENTS) if whole else pooled
            report.append(e)
        return information_gain_bits(self.truth(region), baseline, _expit(np.array(report)), self.eps)

    def _pooled(self, key: int, k: int, region: str, memory: dict) -> np.ndarray:
        """Earlier studies' estimates of cohort k, each about equally, the same region SAME_REGION times as much."""
        if (key, k, region) not in self._pools:
            past = memory[k]
            w = np.array([m / (m + 50.0) * (SAME_REGION if r == region else 1.0) for _, m, r in past])
            self._pools[key, k, region] = w @ np.array([p for p, _, _ in past]) / w.sum()
        return self._pools[key, k, region]
