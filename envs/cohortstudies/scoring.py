"""The reward: information gain in bits of a cohort report over the flat baseline.

For every cohort c and time point t, with all probabilities clipped to [eps, 1 - eps]:

    gain = mean_{c,t} KL(S_c(t) || B(t)) - mean_{c,t} KL(S_c(t) || R_c(t))

where S is the true population survival of the study's region, B the study's overall
Kaplan-Meier survival (the same for every cohort) and R the report; KL is the binary
Kullback-Leibler divergence in bits. Reporting the truth scores the first term (the task's
r_max per instance); reporting the baseline scores 0.
"""
from __future__ import annotations

import numpy as np


def binary_kl_bits(p, q, eps: float) -> np.ndarray:
    """KL(Bernoulli(p) || Bernoulli(q)) in bits, after clipping both to [eps, 1 - eps]."""
    p = np.clip(np.asarray(p, dtype=float), eps, 1 - eps)
    q = np.clip(np.asarray(q, dtype=float), eps, 1 - eps)
    return p * np.log2(p / q) + (1 - p) * np.log2((1 - p) / (1 - q))


def information_gain_bits(truth: np.ndarray, baseline: np.ndarray, report: np.ndarray, eps: float) -> float:
    """Mean KL(truth || baseline) minus mean KL(truth || report); truth and report are (cohorts, times)."""
    truth = np.asarray(truth, dtype=float)
    base = np.broadcast_to(np.asarray(baseline, dtype=float), truth.shape)
    return float(binary_kl_bits(truth, base, eps).mean() - binary_kl_bits(truth, report, eps).mean())
