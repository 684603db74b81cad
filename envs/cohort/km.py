"""Kaplan-Meier survival at fixed time points (lifelines)."""
from __future__ import annotations

import numpy as np
from lifelines import KaplanMeierFitter


def km_at(months: np.ndarray, events: np.ndarray, points) -> list[float | None]:
    """KM survival at each time point; None past the group's last follow-up time (not estimable)."""
    months = np.asarray(months, dtype=float)
    if len(months) == 0:
        return [None for _ in points]
    fit = KaplanMeierFitter().fit(months, np.asarray(events, dtype=bool))
    values = fit.survival_function_at_times(list(points)).to_numpy()
    last = months.max()
    return [float(v) if t <= last else None for v, t in zip(values, points)]
