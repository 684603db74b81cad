"""The error policy of a run: when instances lost to infrastructure errors, or scored on faulty model
replies, stop it.

An instance is lost to an infrastructure error when a model call failed for good (after its
retries): a wrong key, a dead endpoint, a rate limit that never lifts. Such an instance says
nothing about the agent, so it is never scored as a zero: the metrics of its task are marked
invalid until `--resume` plays it again. The policy stops the whole run early instead of
producing more of them:

* `--max-consecutive-errors K` (default 5): K errored instances in a row (in the order they
  finish, over all jobs) stop the run (with W workers, at most W - 1 more were in flight: a worker
  waits for the driver's look at the records after each one, `JobFiles._await_policy`);
* `--fail-on-error N|F` (default 0.1): more than N errored instances (N >= 1), or more than the
  fraction F (0 <= F < 1) of the planned instances, stop the run; 0 stops at the first.

An instance is *faulted* when it was scored on a reply that is not the model's whole answer (a
refusal, a reply cut off at max_tokens or withheld by a content filter, an empty reply, ...: the
record's `model_faults`). It stays scored (what the model gave is its behaviour), but a run made
mostly of them measures the endpoint's refusals or cut-offs, not the agent's learning:

* `--max-consecutive-faults K` (default 10): K faulted instances in a row stop the run;
* `--fail-on-fault N|F|off` (default 0.5): more than N faulted instances, or more than the fraction
  F of the planned instances, stop the run; `off`: faults never stop it.

The fault defaults are looser than the error ones because faults are scored and a weak model makes
some: below half of its instances faulted, a run still measures mostly the agent, and a model
faulting at random on half its replies makes 10 in a row with probability 0.5^10 (~0.1%) at a given
instance; a model that refuses everything is stopped after 10 instances.

A run with any errored instance is incomplete: `clbench rollout` exits with EXIT_INCOMPLETE (3). A
run stopped for its faults exits with EXIT_FAULTED (4) instead: its faulted instances are recorded
and scored, so `--resume` would not play them again (a script resuming runs that exit 3 would
grind on through the same faults).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

#: exit code of a run that finished with errored instances or was stopped for them
EXIT_INCOMPLETE = 3
#: exit code of a run stopped because too many of its instances were scored on faulty model replies
EXIT_FAULTED = 4
DEFAULT_FAIL_ON_ERROR = 0.1
DEFAULT_MAX_CONSECUTIVE = 5
DEFAULT_FAIL_ON_FAULT = 0.5
DEFAULT_MAX_CONSECUTIVE_FAULTS = 10


def parse_threshold(text: str | float, option: str = "--fail-on-error", off: bool = False) -> float:
    """N (a count, >= 1) or F (a fraction, 0 <= F < 1); with `off`, also "off" (never: infinity)."""
    if off and str(text).strip().lower() == "off":
        return math.inf
    what = f"{option} takes a count N >= 1 or a fraction 0 <= F < 1" + (" or off" if off else "")
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{what}, not {text!r}") from None
    if value < 0 or math.isinf(value) or (value >= 1 and value != int(value)) or math.isnan(value):
        raise ValueError(f"{what}, not {text!r}")
    return value


def parse_fail_on_error(text: str | float) -> float:
    return parse_threshold(text)


def parse_fail_on_fault(text: str | float) -> float:
    return parse_threshold(text, "--fail-on-fault", off=True)


def fault_kind(fault) -> str:
    """A model fault's kind: its text up to the details ("step call: the model refused", "memory update
    notes failed"), so that faults of one kind count together."""
    kind = str(fault).split(" (")[0]
    return (kind.split(" failed:")[0] + " failed" if " failed:" in kind else kind)[:80]


@dataclass
class ErrorPolicy:
    fail_on_error: float = DEFAULT_FAIL_ON_ERROR
    max_consecutive: int = DEFAULT_MAX_CONSECUTIVE
    fail_on_fault: float = DEFAULT_FAIL_ON_FAULT
    max_consecutive_faults: int = DEFAULT_MAX_CONSECUTIVE_FAULTS
    planned: int = 0  # instances the run plans to play (set by the runner)
    out: str = ""  # the run directory (set by the runner): a fault stop says where its transcripts are
    errored: int = 0
    consecutive: int = 0
    faulted: int = 0
    consecutive_faults: int = 0
    fault_kinds: dict[str, int] = field(default_factory=dict)
    finished: int = 0
    reason: str | None = None
    faulty: bool = False  # the reason is the model's faults, not infrastructure errors
    examples: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.fail_on_error = parse_fail_on_error(self.fail_on_error)
        self.fail_on_fault = parse_fail_on_fault(self.fail_on_fault)
        if self.max_consecutive < 1:
            raise ValueError("--max-consecutive-errors must be >= 1")
        if self.max_consecutive_faults < 1:
            raise ValueError("--max-consecutive-faults must be >= 1")

    def _limit(self, threshold: float) -> float:
        return threshold if threshold >= 1 else math.floor(threshold * self.planned)

    @property
    def limit(self) -> int:
        """Errored instances tolerated before the run stops."""
        return int(self._limit(self.fail_on_error))

    @property
    def fault_limit(self) -> float:
        """Faulted instances tolerated before the run stops (infinity: `--fail-on-fault off`)."""
        return self._limit(self.fail_on_fault)

    def _spec(self, threshold: float) -> str:
        spec = f"{int(threshold)}" if threshold >= 1 else f"{threshold:g} of {self.planned}"
        return f"more than {spec} ({int(self._limit(threshold))})"

    def describe(self) -> str:
        faults = ("faults never stop it" if math.isinf(self.fail_on_fault) else
                  f"{self.max_consecutive_faults} consecutive faulted instances or {self._spec(self.fail_on_fault)}")
        return (f"stop after {self.max_consecutive} consecutive errored instances or "
                f"{self._spec(self.fail_on_error)}; after {faults}")

    def observe_many(self, finished: int) -> str | None:
        """Count `finished` instances none of which failed on infrastructure or stands on a model
        fault (observe of each, at once)."""
        if finished:
            self.finished += finished
            self.consecutive = self.consecutive_faults = 0
        return self.reason

    def observe(self, rec: dict) -> str | None:
        """Count one finished instance; the stop reason once the policy trips (then for good)."""
        self.finished += 1
        if rec.get("error_kind") != "infrastructure":
            self.consecutive = 0
            self._observe_faults(rec.get("model_faults"))
            return self.reason
        # an errored instance is not scored (its faults are not counted) and says nothing of the
        # model's replies: it leaves the run of faulted instances as it was
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

    def _observe_faults(self, faults: list | None) -> None:
        if not faults:
            self.consecutive_faults = 0
            return
        self.faulted += 1
        self.consecutive_faults += 1
        for fault in faults:
            kind = fault_kind(fault)
            self.fault_kinds[kind] = self.fault_kinds.get(kind, 0) + 1
        if self.reason is not None or math.isinf(self.fail_on_fault):
            return
        if self.consecutive_faults >= self.max_consecutive_faults:
            why = (f"{self.consecutive_faults} instances in a row were scored on faulty model replies "
                   f"(--max-consecutive-faults {self.max_consecutive_faults})")
        elif self.faulted > self.fault_limit:
            why = (f"{self.faulted} of {self.finished} finished instances were scored on faulty model replies, "
                   f"more than --fail-on-fault allows ({int(self.fault_limit)})")
        else:
            return
        kinds = ", ".join(f"{k} x{n}" for k, n in sorted(self.fault_kinds.items(), key=lambda kv: -kv[1])[:4])
        where = f"; transcripts in {self.out}/transcripts (`clbench view {self.out}`)" if self.out else ""
        self.reason = f"{why}: {kinds}; the run does not measure the agent{where}"
        self.faulty = True
