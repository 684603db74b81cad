"""Adversarial agents for CohortStudies: reward without analysing the study's data.

Memoryless families (`CohortStudiesEnv.policy_families`, searched by `clbench redteam`):
- FixedTable: one table for every instance, read from no data: one curve for every cohort (a grid),
  or the mean true survival per cohort over the train split's instances (what a model trained on
  the train split's answers would report).
- BaselineShift: reads only the study's overall Kaplan-Meier (get_data_summary) and reports it,
  shifted in logit by `shift`, for every cohort.

Stateful, feedback-only: FeedbackSearch ignores the data and tunes a table from the feedback alone
(coordinate search over a global curve and per-cohort offsets, each step judged by the report's
KL the feedback states, compared within a region). With per-cohort feedback (too high / too low)
this kind of agent learned a table worth 84% of r_max; tests/test_cohortstudies.py checks it stays
below r_reference with the feedback the env gives now.
"""
from __future__ import annotations

import functools
import json
import re

import numpy as np

from clbench.agent import Agent
from clbench.agents.cohortstudies import _expit, _logit, parse_brief


def _report(table: dict[str, list[float]]) -> str:
    return json.dumps({"tool": "submit_cohort_report",
                       "arguments": {"survival": {c: [round(float(x), 6) for x in v] for c, v in table.items()}}})


@functools.lru_cache(maxsize=4)
def train_truth_table(env_id: str) -> dict[str, list[float]]:
    """Mean true survival per cohort over the train split's instances (the train split's answers)."""
    import gymnasium as gym

    env = gym.make(env_id, split="train").unwrapped
    try:
        truth = env.latent()["truth"]
        cohorts = list(next(iter(truth.values())))
        return {c: list(np.mean([t[c] for t in truth.values()], axis=0)) for c in cohorts}
    finally:
        env.close()


class FixedTable(Agent):
    """The same report on every instance, whatever the study shows."""

    name = "fixed-table"
    deterministic = True

    def __init__(self, card, seed: int = 0, latent=None, source: str = "constant",
                 curve: tuple[float, float, float] = (0.87, 0.73, 0.58)):
        super().__init__(card, seed=seed)
        self.source, self.curve = source, [float(x) for x in curve]

    def act(self, observation: str, info: dict) -> str:
        _levels, cohorts = parse_brief(observation)
        if self.source == "train-truth":
            env_id = self.card["env_id"] if isinstance(self.card, dict) else self.card.env_id
            return _report(train_truth_table(env_id))
        return _report({c: self.curve for c in cohorts})


class BaselineShift(Agent):
    """The study's overall Kaplan-Meier for every cohort, shifted in logit by `shift`."""

    name = "baseline-shift"
    deterministic = True

    def __init__(self, card, seed: int = 0, latent=None, shift: float = 0.0):
        super().__init__(card, seed=seed)
        self.shift = float(shift)

    def begin_instance(self, observation: str, info: dict) -> None:
        self.cohorts = parse_brief(observation)[1]
        self.asked = False

    def act(self, observation: str, info: dict) -> str:
        if not self.asked:
            self.asked = True
            return json.dumps({"tool": "get_data_summary", "arguments": {}})
        found = re.findall(r"S\(\d+\) = ([\d.]+)", observation)
        base = np.array([float(x) for x in found[:3]]) if len(found) >= 3 else np.array([0.9, 0.8, 0.7])
        curve = _expit(_logit(base) + self.shift)
        return _report({c: list(curve) for c in self.cohorts})


class FeedbackSearch(Agent):
    """Stateful and data-blind: coordinate search on a table, judged by the feedback's report KL.

    The table is a global logit curve (3 numbers) plus a logit offset per cohort. Each instance
    tries the current best with one coordinate moved by +-step; the feedback's mean KL of the report
    is compared with the best seen for the same region (regions recur; their truths differ), a move
    that lowers it is kept, a move that does not is reversed next time, and the step halves after a
    full unsuccessful sweep."""

    name = "feedback-search"
    deterministic = True

    def __init__(self, card, seed: int = 0, latent=None, step: float = 0.4, start: float = 0.8):
        super().__init__(card, seed=seed)
        self.step0 = float(step)
        self.theta: np.ndarray | None = None  # 3 global logits + one offset per cohort
        self.start = float(start)
        self.best: dict[str, float] = {}  # region -> lowest report KL seen
        self.coord, self.sign, self.step, self.failures = 0, 1.0, self.step0, 0
        #: False: play the best table found so far, learn nothing (the fixed table it learned)
        self.learning = True

    def begin_instance(self, observation: str, info: dict) -> None:
        self.cohorts = list(parse_brief(observation)[1])
        m = re.search(r"region (\w+)\.", observation)
        self.region = m.group(1) if m else ""
        if self.theta is None:
            self.theta = np.concatenate([_logit([self.start, self.start ** 2, self.start ** 3]),
                                         np.zeros(len(self.cohorts))])
        self.trial = self.theta.copy()
        if self.learning and self.region in self.best:  # a region with a known KL: test one move against it
            self.trial[self.coord] += self.sign * self.step

    def _table(self, theta: np.ndarray) -> dict[str, list[float]]:
        return {c: list(_expit(theta[:3] + theta[3 + i])) for i, c in enumerate(self.cohorts)}

    def act(self, observation: str, info: dict) -> str:
        return _report(self._table(self.trial))

    def end_instance(self, reward: float, info: dict, observation: str = "") -> None:
        m = re.search(r"mean KL\(true \|\| your report\): ([\d.]+)", observation)
        if not m or not self.learning:
            return
        kl = float(m.group(1))
        if self.region not in self.best:
            self.best[self.region] = kl
            return
        if kl < self.best[self.region]:
            self.best[self.region], self.theta, self.failures = kl, self.trial, 0
            return
        if self.sign > 0:  # try the other direction of the same coordinate next
            self.sign = -1.0
            return
        self.sign, self.coord = 1.0, (self.coord + 1) % len(self.theta)
        self.failures += 1
        if self.failures >= len(self.theta):
            self.step, self.failures = self.step / 2, 0

    def state_dict(self) -> dict:
        return {"theta": None if self.theta is None else self.theta.tolist(), "best": self.best,
                "coord": self.coord, "sign": self.sign, "step": self.step, "failures": self.failures}

    def load_state_dict(self, state: dict) -> None:
        self.theta = None if state["theta"] is None else np.array(state["theta"])
        self.best = dict(state["best"])
        self.coord, self.sign, self.step, self.failures = state["coord"], state["sign"], state["step"], state["failures"]
