"""Kaplan-Meier survival at fixed time points (numpy).

The same estimator and arithmetic as lifelines' KaplanMeierFitter (product over distinct event
times of (at risk - deaths) / at risk, accumulated in log space, read as a right-continuous step
function), about a hundred times cheaper per fit and without lifelines' 1-2 s import;
tests/test_performance_contracts.py checks it against lifelines.
"""
from __future__ import annotations

import numpy as np


def km_at(months: np.ndarray, events: np.ndarray, points) -> list[float | None]:
    """KM survival at each time point; None past the group's last follow-up time (not estimable)."""
    months = np.asarray(months, dtype=float)
    if len(months) == 0:
        return [None for _ in points]
    order = np.argsort(months, kind="stable")
    times, first = np.unique(months[order], return_index=True)
    at_risk = len(months) - first
    deaths = np.add.reduceat(np.asarray(events, dtype=bool)[order].astype(np.int64), first)
    with np.errstate(divide="ignore"):  # everyone at risk dies: log(0) = -inf, survival 0
        survival = np.exp(np.cumsum(np.log(at_risk - deaths) - np.log(at_risk)))
    at = np.searchsorted(times, np.asarray(points, dtype=float), side="right") - 1
    last = times[-1]
    return [(float(survival[i]) if i >= 0 else 1.0) if t <= last else None for i, t in zip(at, points)]
