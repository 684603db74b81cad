"""Memoryless red-team policies for SpectrumMonitor (`SpectrumMonitorEnv.policy_families`).

Each reads the scan it is shown and nothing else (no memory across scans, no latent values): the
kinds of single-scan rule an adversary would try first to score without learning the band plan.
The red team plays every point of their grids stateless; none may reach r_reference (the stateless
`SpectrumReference`, whose single-scan rule is the best such rule found).

- `EchoThreshold`: every peak at least `min_width` wide and `min_power` strong, its width scaled.
- `WidthPartner`: peaks whose width matches another peak's (channels of one kind share a width).
- `NoOverlap`: peaks overlapping a stronger (or wider) one dropped (channels of a plan do not overlap).
- `StrongestK`: the `k` strongest peaks.
- `GridFit`: peaks on the spacing that best explains the scan's pairwise distances (a regular plan).
"""
from __future__ import annotations

import numpy as np

from clbench.agent import Agent
from clbench.agents.spectrummonitor import Peaks, drop_overlapping, parse_peaks, report, transmitter


class _Memoryless(Agent):
    """Reports `select(peaks)` of each scan, widths times `width_scale`; keeps nothing across scans."""

    deterministic = True

    def __init__(self, card, seed: int = 0, latent=None, min_width: float = 0.0, width_scale: float = 1.0, **params):
        super().__init__(card, seed=seed)
        self.min_width, self.width_scale = float(min_width), float(width_scale)
        self.params = params

    def select(self, peaks: Peaks) -> Peaks:
        return peaks

    def act(self, observation: str, info: dict) -> str:
        peaks = [p for p in parse_peaks(observation) if p[2] >= self.min_width]
        return report([transmitter(c, w * self.width_scale, p) for c, p, w in self.select(peaks)])


class EchoThreshold(_Memoryless):
    def __init__(self, card, seed: int = 0, latent=None, min_power: float = -200.0, **kw):
        super().__init__(card, seed, latent, **kw)
        self.min_power = float(min_power)

    def select(self, peaks: Peaks) -> Peaks:
        return [p for p in peaks if p[1] >= self.min_power]


class WidthPartner(_Memoryless):
    def __init__(self, card, seed: int = 0, latent=None, tolerance: float = 0.2, **kw):
        super().__init__(card, seed, latent, **kw)
        self.tolerance = float(tolerance)

    def select(self, peaks: Peaks) -> Peaks:
        return [p for i, p in enumerate(peaks)
                if any(abs(q[2] - p[2]) <= self.tolerance * p[2] for j, q in enumerate(peaks) if j != i)]


class NoOverlap(_Memoryless):
    def __init__(self, card, seed: int = 0, latent=None, keep: str = "stronger", slack: float = 0.0, **kw):
        super().__init__(card, seed, latent, **kw)
        self.key, self.slack = (1 if keep == "stronger" else 2), float(slack)

    def select(self, peaks: Peaks) -> Peaks:
        return drop_overlapping(peaks, self.key, self.slack)


class StrongestK(_Memoryless):
    def __init__(self, card, seed: int = 0, latent=None, k: int = 5, **kw):
        super().__init__(card, seed, latent, **kw)
        self.k = int(k)

    def select(self, peaks: Peaks) -> Peaks:
        return sorted(sorted(peaks, key=lambda p: -p[1])[: self.k])


class GridFit(_Memoryless):
    def __init__(self, card, seed: int = 0, latent=None, tolerance_mhz: float = 2.0, **kw):
        super().__init__(card, seed, latent, **kw)
        self.tol = float(tolerance_mhz)

    def select(self, peaks: Peaks) -> Peaks:
        if len(peaks) < 3:
            return peaks
        c = np.array([p[0] for p in peaks])
        d = np.abs(c[:, None] - c[None, :])
        best, on = -1, None
        for s in np.arange(8.0, 40.0, 0.25):  # half-spacings too: narrowband channels sit between wideband ones
            near = (np.abs(d - s * np.round(d / s)) <= self.tol) & (d > self.tol)
            if near.sum() > best:
                best, on = int(near.sum()), near.any(axis=1)
        return [p for p, keep in zip(peaks, on) if keep]
