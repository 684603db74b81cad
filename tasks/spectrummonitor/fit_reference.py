"""Fit the stateless SpectrumReference's single-scan model on the TRAIN split's worlds.

    python tasks/spectrummonitor/fit_reference.py        # prints COEF for agents/spectrummonitor.py

The logistic weights (`COEF`) are fitted on every peak of the train split's canonical train world
and train worlds 1-30 (label: the peak lies on a channel transmitting in its scan), then tuned by
coordinate search for the reference's mean IoU on the same scans (train worlds 31-40 are held out
to check it). No test-split world (canonical or fresh) is used: tests/test_spectrummonitor.py checks
that the constants reproduce from here and that the rule holds on fresh worlds.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

import clbench  # noqa: F401  registers the envs
from clbench.agents import spectrummonitor as sm
from clbench.envs.spectrummonitor.generator import iou

ENV = "clbench/SpectrumMonitor-v6"
FIT_WORLDS = [None, *range(1, 31)]
CHECK_WORLDS = range(31, 41)


def scans(world_seed):
    """(observation, truth intervals, band) of every scan of one train world."""
    env = gym.make(ENV, split="train", world_seed=world_seed).unwrapped
    out = []
    for slot in env.schedule.order(0):
        obs, _ = env.reset(seed=0, options={"instance": slot.instance_id, "stateless": True})
        out.append((obs, [c.interval for c in env._scan.active], (env.low, env.high)))
    return out


def logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-2, iters: int = 30) -> np.ndarray:
    """Ridge-penalized logistic regression by Newton's method."""
    b = np.zeros(x.shape[1])
    for _ in range(iters):
        p = 1 / (1 + np.exp(-np.clip(x @ b, -50, 50)))
        h = (x * (p * (1 - p))[:, None]).T @ x + l2 * np.eye(len(b))
        b -= np.linalg.solve(h, x.T @ (p - y) + l2 * b)
    return b


def prepared(worlds) -> list:
    """(peaks, feature matrix, truth, band) of every scan of these train worlds."""
    out = []
    for w in worlds:
        for obs, truth, band in scans(w):
            peaks = sm.parse_peaks(obs)
            x = np.array(sm.peak_features(peaks, *sm.scan_header(obs))).reshape(len(peaks), len(sm.FEATURES))
            out.append((peaks, x, truth, band))
    return out


def mean_iou(data, coef) -> float:
    """The stateless reference's mean IoU on `prepared` data with these weights (peaks scoring >= 0 kept,
    wide ones' widths `snapped` as the reference reports them)."""
    scores = []
    for peaks, x, truth, (low, high) in data:
        keep = x @ coef >= 0 if len(peaks) else []
        kept = sm.snapped([p for p, k in zip(peaks, keep) if k], peaks)
        scores.append(iou([(c - w / 2, c + w / 2) for c, _, w in kept], truth, low, high))
    return float(np.mean(scores))


def fit(rounds: int = 3, data: list | None = None) -> tuple[float, ...]:
    """Logistic weights (maximum likelihood), then tuned by coordinate search for the mean IoU the
    reference's rule gets on the same train worlds (the score, not the likelihood, is what counts).
    `data`: `prepared(FIT_WORLDS)`, if the caller has it already."""
    data = prepared(FIT_WORLDS) if data is None else data
    coef = logistic(np.vstack([x for _, x, _, _ in data]),
                    np.array([sm.on_channel(p, truth) for peaks, _, truth, _ in data for p in peaks]))
    best = mean_iou(data, coef)
    for _ in range(rounds):
        for k in range(len(coef)):
            for step in (0.5, -0.5, 0.2, -0.2, 0.1, -0.1):
                trial = coef.copy()
                trial[k] += step
                score = mean_iou(data, trial)
                if score > best + 1e-6:
                    coef, best = trial, score
    return tuple(round(float(v), 3) for v in coef)


def widths(coef, grid=((0.9, 0.95, 1.0), (0.0, 0.5, 1.0)), data: list | None = None) -> tuple[float, float]:
    """(WIDE_SCALE, NARROW_SNAP): the grid point with the best mean IoU of the rule with weights `coef` on FIT_WORLDS
    (`data`: `prepared(FIT_WORLDS)`, if the caller has it already)."""
    data = prepared(FIT_WORLDS) if data is None else data
    saved = sm.WIDE_SCALE, sm.NARROW_SNAP
    try:
        scores = {}
        for point in ((a, b) for a in grid[0] for b in grid[1]):
            sm.WIDE_SCALE, sm.NARROW_SNAP = point
            scores[point] = mean_iou(data, np.array(coef))
    finally:
        sm.WIDE_SCALE, sm.NARROW_SNAP = saved
    return max(scores, key=scores.get)


if __name__ == "__main__":
    train = prepared(FIT_WORLDS)  # the widths and the fit read the same scans: prepared once
    print(f"WIDE_SCALE, NARROW_SNAP = {widths(sm.COEF, data=train)}")
    coef = fit(data=train)
    print(f"COEF = {coef}")
    held = prepared(CHECK_WORLDS)
    print(f"held-out train worlds {CHECK_WORLDS.start}-{CHECK_WORLDS.stop - 1}: mean IoU "
          f"{mean_iou(held, np.array(coef)):.4f} (the current COEF: {mean_iou(held, np.array(sm.COEF)):.4f})")
