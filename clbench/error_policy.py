"""The error policy of a run: when instances lost to infrastructure errors stop it.

An instance is lost to an infrastructure error when a model call failed for good (after its
retries): a wrong key, a dead endpoint, a rate limit that never lifts. Such an instance says
nothing about the agent, so it is never scored as a zero: the metrics of its task are marked
invalid until `--resume` plays it again. The policy stops the whole run early instead of
producing more of them:

* `--max-consecutive-errors K` (default 5): K errored instances in a row (in the order they
  finish, over all jobs) stop the run;
* `--fail-on-error N|F` (default 0.1): more than N errored instances (N >= 1), or more than the
  fraction F (0 <= F < 1) of the planned instances, stop the run; 0 stops at the first.

A run with any errored instance is incomplete: `clbench rollout` exits with EXIT_INCOMPLETE.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

#: exit code of a run that finished with errored instances or was stopped by the policy
EXIT_INCOMPLETE = 3
DEFAULT_FAIL_ON_ERROR = 0.1
DEFAULT_MAX_CONSECUTIVE = 5


def parse_fail_on_error(text: str | float) -> float:
    """N (a count, >= 1) or F (a fraction, 0 <= F < 1)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"--fail-on-error takes a count N >= 1 or a fraction 0 <= F < 1, not {text!r}") from None
    if value < 0 or (value >= 1 and value != int(value)) or math.isnan(value):
        raise ValueError(f"--fail-on-error takes a count N >= 1 or a fraction 0 <= F < 1, not {text!r}")
    return value


@dataclass
class ErrorPolicy:
    fail_on_error: float = DEFAULT_FAIL_ON_ERROR
    max_consecutive: int = DEFAULT_MAX_CONSECUTIVE
    planned: int = 0  # instances the run plans to play (set by the runner)
    errored: int = 0
    consecutive: int = 0
    finished: int = 0
    reason: str | None = None
    examples: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.fail_on_error = parse_fail_on_error(self.fail_on_error)
        if self.max_consecutive < 1:
            raise ValueError("--max-consecutive-errors must be >= 1")

    @property
    def limit(self) -> int:
        """Errored instances tolerated before the run stops."""
        if self.fail_on_error >= 1:
            return int(self.fail_on_error)
        return int(math.floor(self.fail_on_error * self.planned))

    def describe(self) -> str:
        spec = f"{int(self.fail_on_error)}" if self.fail_on_error >= 1 else f"{self.fail_on_error:g} of {self.planned}"
        return f"stop after {self.max_consecutive} consecutive errored instances or more than {spec} ({self.limit})"

    def observe_many(self, finished: int) -> str | None:
        """Count `finished` instances none of which failed on infrastructure (observe of each, at once)."""
        if finished:
            self.finished += finished
            self.consecutive = 0
        return self.reason

    def observe(self, rec: dict) -> str | None:
        """Count one finished instance; the stop reason once the policy trips (then for good)."""
        self.finished += 1
        if rec.get("error_kind") != "infrastructure":
            self.consecutive = 0
            return self.reason
        self.errored += 1
        self.consecutive += 1
        if len(self.examples) < 3:
            self.examples.append(str(rec.get("error"))[:300])
        if self.reason is None:
            last = str(rec.get("error"))[:200]
            if self.consecutive >= self.max_consecutive:
                self.reason = (f"{self.consecutive} instances in a row failed on model-call errors "
                               f"(--max-consecutive-errors {self.max_consecutive}); last: {last}")
            elif self.errored > self.limit:
                self.reason = (f"{self.errored} instances failed on model-call errors, more than --fail-on-error "
                               f"allows ({self.limit}); last: {last}")
        return self.reason
