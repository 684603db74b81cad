"""Worlds of CohortStudies: the canonical one (tasks/cohortstudies/default.yaml as written) and
drawn ones (the train split, fresh worlds from a world seed).

A drawn world keeps the task's kind and difficulty and redraws every latent value: which patient
type has which covariate profile (so which variables predict survival), each survival curve and the
disease's overall severity, the regions' names and type mixes, the per-type distributions of the
standard variables, the studies' enrollment biases and which region each study instance samples,
arbitrary numeric codes, and the shared consortium column that a later study re-codes (its name and
the new coding, of the same kind as the canonical one: a reversed count on a drawn scale, so an
agent that keeps the old mapping selects the wrong patients).
Nothing here is shown to agents; observations show what a study's tables and tags say.
"""
from __future__ import annotations

import copy
from typing import Callable

import numpy as np

_PREFIXES = ["North", "East", "South", "West", "High", "Low", "Red", "Stone", "Oak", "Ash", "Elm", "Glen",
             "Bright", "Mill", "Fair", "Cold", "Long", "Green"]
_SUFFIXES = ["vale", "march", "port", "field", "ford", "moor", "haven", "brook", "ridge", "wick", "stead", "mouth"]
#: names of the shared consortium column in drawn worlds
_SHARED_NAMES = ["cons_cog", "cog_total", "ccs_points", "cognitive_index", "cs_total", "cog_points"]
#: full scales of the reversed (deficit) re-coding in drawn worlds, standard = K - value: read the old way,
#: the cohorts' cut-offs then select the other end of the scale (as in the canonical world)
_DEFICIT_SCALES = [46.0, 47.0, 48.0, 49.0, 51.0, 52.0]


def canonical(spec: dict) -> dict:
    """The canonical world: the population and studies as written."""
    return {"population": spec["population"], "studies": spec["studies"]}


def draw_world(spec: dict, rng_for: Callable[[str], np.random.Generator]) -> dict:
    """A fresh world of the same kind as `spec`'s; `rng_for(purpose)` gives this world's generators."""
    pop = copy.deepcopy(spec["population"])
    studies = copy.deepcopy(spec["studies"])
    _draw_survival(pop, rng_for("survival"))
    renamed = _draw_regions(pop, rng_for("regions"))
    _draw_variables(pop, rng_for("variables"), _shared_var(studies))
    rng = rng_for("studies")
    for study in studies:
        weights = np.asarray(study["type_weights"], dtype=float) * np.exp(rng.normal(0.0, 0.15, len(pop["types"])))
        study["type_weights"] = [round(float(w), 4) for w in weights]
        regions = [renamed[inst["region"]] for inst in study["instances"]]
        for inst, region in zip(study["instances"], rng.permutation(regions)):
            inst["region"] = str(region)
        for col in study["columns"]:
            _draw_numeric_codes(col, rng)
    _draw_recoding(studies, rng_for("recoding"))
    return {"population": pop, "studies": studies}


def _draw_survival(pop: dict, rng: np.random.Generator) -> None:
    """Each type's Weibull curve jittered, and the disease's overall severity (one time scale for all
    curves), so no world's survival level is another's."""
    n = len(pop["types"])
    severity = np.exp(rng.choice([-1.0, 1.0]) * rng.uniform(0.25, 0.5))
    shape = np.asarray(pop["weibull_shape"], dtype=float) * rng.uniform(0.92, 1.08, n)
    scale = np.asarray(pop["weibull_scale_months"], dtype=float) * severity * np.exp(rng.normal(0.0, 0.12, n))
    pop["weibull_shape"] = [round(float(x), 3) for x in shape]
    pop["weibull_scale_months"] = [round(float(x), 2) for x in scale]


def _draw_regions(pop: dict, rng: np.random.Generator) -> dict[str, str]:
    """New region names; each takes one written mix (shuffled) redrawn around it. Returns old -> new name."""
    old = list(pop["regions"])
    pool = [p + s for p in _PREFIXES for s in _SUFFIXES if p + s not in old]
    names = [str(n) for n in rng.choice(pool, size=len(old), replace=False)]
    mixes = [np.asarray(pop["regions"][r], dtype=float) for r in old]
    mixes = [mixes[i] for i in rng.permutation(len(old))]
    pop["regions"] = {n: [round(float(x), 4) for x in rng.dirichlet(40.0 * m / m.sum())] for n, m in zip(names, mixes)}
    return dict(zip(old, names))


def _draw_variables(pop: dict, rng: np.random.Generator, drifting: str | None) -> None:
    """Which type has which covariate profile (one permutation of the per-type parameters of every
    standard variable: the variables that predict survival change, the studies' enrollment biases and
    the regions' mixes stay with the survival curves, so their size stays), each redrawn around it.
    As in the canonical world, the profile that stands out on the re-coded variable belongs to one of
    the two shortest-lived types (so the re-coding matters as much), and the shortest-lived type's
    profile changes."""
    n = len(pop["types"])
    short = set(np.argsort(pop["weibull_scale_months"])[:2].tolist())
    means = np.asarray(pop["variables"][drifting]["mean"], dtype=float) if drifting else None
    standout = int(np.argmax(np.abs(means - means.mean()))) if means is not None else None
    while True:
        order = rng.permutation(n)
        if order[-1] != n - 1 and (standout is None or int(np.flatnonzero(order == standout)[0]) in short):
            break
    for var in pop["variables"].values():
        for key in ("mean", "sd", "median", "sdlog", "probs"):
            if key in var:
                var[key] = [var[key][i] for i in order]
    for var in pop["variables"].values():
        if var["dist"] == "normal":
            sd = np.asarray(var["sd"], dtype=float)
            var["mean"] = [round(float(x), 3) for x in np.asarray(var["mean"], dtype=float) + rng.normal(0, 0.25, len(sd)) * sd]
        elif var["dist"] == "lognormal":
            sdlog = np.asarray(var["sdlog"], dtype=float)
            var["median"] = [round(float(x), 4) for x in
                             np.asarray(var["median"], dtype=float) * np.exp(rng.normal(0, 0.25, len(sdlog)) * sdlog)]
        else:
            var["probs"] = [[round(float(x), 4) for x in rng.dirichlet(60.0 * np.asarray(p, dtype=float) + 0.5)]
                            for p in var["probs"]]


def _draw_numeric_codes(col: dict, rng: np.random.Generator) -> None:
    """Integer labels of a categorical code (e.g. 1/2 for two levels) stand for a drawn permutation."""
    codes = col["coding"].get("codes")
    if not codes or not all(isinstance(k, int) for k in codes):
        return
    labels = list(codes)
    targets = [codes[k] for k in labels]
    col["coding"]["codes"] = {k: targets[i] for k, i in zip(labels, rng.permutation(len(labels)))}


def _draw_recoding(studies: list[dict], rng: np.random.Generator) -> None:
    """The shared consortium column: a drawn name in every study that has it, and from the study that
    re-codes it on (the first whose coding differs from the first study's), a drawn full scale K of the
    reversed count, standard = K - value."""
    shared = [(s, c) for s in studies for c in s["columns"] if c["name"] == _shared_name(studies)]
    if not shared:
        return
    name = str(rng.choice(_SHARED_NAMES))
    scale = float(rng.choice(_DEFICIT_SCALES))
    first = shared[0][1]["coding"]
    for _study, col in shared:
        col["name"] = name
        if col["coding"] != first:
            col["coding"] = {"numeric": {**col["coding"]["numeric"], "scale": -1.0, "offset": scale}}


def _shared_name(studies: list[dict]) -> str | None:
    """The shared column some study leaves untagged (coded as the data dictionary last said): the one that drifts."""
    return next((c["name"] for s in studies for c in s["columns"] if c.get("documented", True) is False), None)


def _shared_var(studies: list[dict]) -> str | None:
    """The standard variable of the column that drifts (None if no study leaves a column untagged)."""
    name = _shared_name(studies)
    return next((c["var"] for s in studies for c in s["columns"] if c["name"] == name), None)
