"""The latent population shared by every study (never shown to agents).

A small set of patient types drives survival: type k has Weibull survival
S_k(t) = exp(-(t / scale_k) ** shape_k). Regions differ only in their mix of types. Given the
type, the standard variables are independent (normal, lognormal or categorical with per-type
parameters), so the population survival of a cohort c in region r is exact:

    S_c(t) = sum_k P_r(k | c) S_k(t),   P_r(k | c) ∝ pi_rk * prod_{conditions v in c} P(v | k)

which is the truth the reward compares reports with.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clbench.envs.cohortstudies.codings import Condition, Interval, parse_conditions


@dataclass(frozen=True)
class StandardVariable:
    """One standard variable and its per-type distribution."""

    name: str
    text: str
    dist: str  # normal | lognormal | categorical
    params: dict
    levels: tuple[str, ...] | None = None  # categorical level names
    integer: bool = False
    bounds: tuple[float, float] = (-np.inf, np.inf)

    @classmethod
    def from_spec(cls, name: str, spec: dict) -> "StandardVariable":
        levels = tuple(str(v) for v in spec["levels"]) if spec["dist"] == "categorical" else None
        params = {k: np.asarray(spec[k], dtype=float) for k in ("mean", "sd", "median", "sdlog", "probs") if k in spec}
        bounds = tuple(float(b) for b in spec.get("bounds", (-np.inf, np.inf)))
        return cls(name, spec["text"], spec["dist"], params, levels, bool(spec.get("integer", False)), bounds)

    def sample(self, rng: np.random.Generator, types: np.ndarray) -> np.ndarray:
        """Standard values for patients of the given types (level names for categorical)."""
        if self.dist == "categorical":
            cum = np.cumsum(self.params["probs"][types], axis=1)
            idx = (rng.random(len(types))[:, None] > cum).sum(axis=1)
            return np.asarray(self.levels, dtype=object)[np.minimum(idx, len(self.levels) - 1)]
        z = rng.standard_normal(len(types))
        if self.dist == "normal":
            x = self.params["mean"][types] + self.params["sd"][types] * z
        else:
            x = self.params["median"][types] * np.exp(self.params["sdlog"][types] * z)
        if self.integer:
            x = np.round(x)
        return np.clip(x, *self.bounds)

    def prob(self, domain, k: int) -> float:
        """P(value in domain | type k), exact (rounding and clipping included)."""
        if self.dist == "categorical":
            return float(sum(p for lv, p in zip(self.levels, self.params["probs"][k]) if lv in domain))
        lo, hi = domain.lo, domain.hi
        if self.integer:  # round(x) >= c  <=>  x >= c - 0.5 for integer c
            lo, hi = np.ceil(lo) - 0.5, np.ceil(hi) - 0.5
        lo = -np.inf if domain.lo <= self.bounds[0] else lo  # clipping piles mass on the bounds
        hi = np.inf if domain.hi > self.bounds[1] else hi
        # ndtr((x - mu) / sd) is what scipy.stats.norm.cdf(x, mu, sd) computes, without its slow import
        from scipy.special import ndtr

        if self.dist == "normal":
            mu, sd = self.params["mean"][k], self.params["sd"][k]
            return float(ndtr((hi - mu) / sd) - ndtr((lo - mu) / sd))
        mu, sd = np.log(self.params["median"][k]), self.params["sdlog"][k]
        log = lambda v: np.log(v) if v > 0 else -np.inf  # noqa: E731
        return float(ndtr((log(hi) - mu) / sd) - ndtr((log(lo) - mu) / sd))

    def describe(self) -> str:
        if self.levels is not None:
            return f"{self.name} (levels: {', '.join(repr(v) if not v.isdigit() else v for v in self.levels)}): {self.text}"
        return f"{self.name} (numeric): {self.text}"


class Population:
    """Types, regions and standard variables from the task spec's `population` block."""

    def __init__(self, spec: dict):
        self.types = list(spec["types"])
        self.shape = np.asarray(spec["weibull_shape"], dtype=float)
        self.scale = np.asarray(spec["weibull_scale_months"], dtype=float)
        self.regions = {r: np.asarray(w, dtype=float) / np.sum(w) for r, w in spec["regions"].items()}
        self.variables = {n: StandardVariable.from_spec(n, v) for n, v in spec["variables"].items()}

    @property
    def levels(self) -> dict[str, list[str] | None]:
        return {n: (list(v.levels) if v.levels is not None else None) for n, v in self.variables.items()}

    def conditions(self, text: str) -> tuple[Condition, ...]:
        return parse_conditions(text, self.levels)

    def type_survival(self, months) -> np.ndarray:
        """S_k(t) for each type (rows) and time (columns)."""
        t = np.asarray(months, dtype=float)[None, :]
        return np.exp(-(t / self.scale[:, None]) ** self.shape[:, None])

    def sample(self, rng: np.random.Generator, region: str, n: int) -> dict[str, np.ndarray]:
        """n patients of `region`: latent `type`, true survival `months`, and every standard variable."""
        types = rng.choice(len(self.types), size=n, p=self.regions[region])
        out = {"type": types}
        for name, var in self.variables.items():
            out[name] = var.sample(rng, types)
        u = rng.random(n)
        out["months"] = self.scale[types] * (-np.log1p(-u)) ** (1.0 / self.shape[types])
        return out

    def cohort_survival(self, region: str, conditions: tuple[Condition, ...], months) -> np.ndarray:
        """Exact population survival of the cohort in `region` at the given months."""
        post = self.regions[region].copy()
        for cond in conditions:
            var = self.variables[cond.var]
            post *= [var.prob(cond.domain, k) for k in range(len(self.types))]
        if post.sum() <= 0:
            raise ValueError(f"cohort {conditions} is empty in region {region}")
        return (post / post.sum()) @ self.type_survival(months)

    def in_domain(self, values: np.ndarray, domain) -> np.ndarray:
        """Mask of standard values inside a condition's domain."""
        if isinstance(domain, Interval):
            return domain.contains(values.astype(float))
        return np.isin(values.astype(str), list(domain))
