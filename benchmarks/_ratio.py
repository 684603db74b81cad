"""Overhead ratios with targets, measured as medians of interleaved repeats (shared by the benches).

A ratio compares clbench's cost with a baseline doing the same work, both sides timed in the same
run and alternated repeat by repeat, so a busy machine slows both alike. Each repeat gives one
ratio; the reported value is their median and the noise is their spread (median absolute
deviation, scaled to a standard deviation). A ratio *misses* when its median is on the wrong
side of the target by more than that noise. Every ratio carries its definition (what is divided
by what), printed under the table; a ratio whose prerequisite is missing (a bench not written
yet, no Docker engine) is reported as not available, never as a pass or a miss.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass


@dataclass
class Ratio:
    name: str
    samples: list[float]  # one ratio per repeat
    target: float
    better: str  # "lower" (overhead: value <= target) or "higher" (speed: value >= target)
    definition: str = ""  # numerator / denominator, in words
    unavailable: str = ""  # why it was not measured (then samples is empty)

    @property
    def available(self) -> bool:
        return bool(self.samples) and not self.unavailable

    @property
    def value(self) -> float:
        return statistics.median(self.samples)

    @property
    def noise(self) -> float:
        """1.4826 x the median absolute deviation: a robust standard deviation of one repeat."""
        med = self.value
        return 1.4826 * statistics.median(abs(s - med) for s in self.samples) if len(self.samples) > 1 else 0.0

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.samples), max(self.samples)

    @property
    def meets(self) -> bool:
        return self.value <= self.target if self.better == "lower" else self.value >= self.target

    @property
    def misses(self) -> bool:
        """Off target by more than the noise."""
        if not self.available:
            return False
        if self.better == "lower":
            return self.value > self.target + self.noise
        return self.value < self.target - self.noise

    def row(self) -> str:
        op = "<=" if self.better == "lower" else ">="
        if not self.available:
            return f"| {self.name} | - | {op} {self.target:g} | - | - | - | not available: {self.unavailable} |"
        lo, hi = self.spread
        verdict = "ok" if self.meets else ("within noise" if not self.misses else "MISS")
        return (f"| {self.name} | {self.value:.3f} | {op} {self.target:g} | {self.noise:.3f} | "
                f"{lo:.3f}-{hi:.3f} | {len(self.samples)} | {verdict} |")


HEADER = ("| ratio | median | target | noise (1 sd) | min-max | repeats | verdict |\n"
          "|---|---|---|---|---|---|---|")


def table(ratios: list[Ratio]) -> str:
    """The ratios as a markdown table, each one's definition listed under it."""
    rows = "\n".join([HEADER, *(r.row() for r in ratios)])
    defs = "\n".join(f"- {r.name}: {r.definition}" for r in ratios if r.definition)
    return rows + ("\n\nDefinitions:\n" + defs if defs else "")


def not_available(name: str, target: float, better: str, why: str, definition: str = "") -> Ratio:
    return Ratio(name, [], target, better, definition, unavailable=why)


def seconds(fn, clock=time.perf_counter) -> float:
    t = clock()
    fn()
    return clock() - t


def interleaved(ours, baseline, repeats: int, clock=time.perf_counter) -> list[float]:
    """Per-repeat ratios ours/baseline, the two timed alternately (one warm-up round first); the
    side that goes first alternates too, so neither always runs on a warmer cache."""
    ours(), baseline()
    out = []
    for k in range(repeats):
        if k % 2:
            b = seconds(baseline, clock)
            a = seconds(ours, clock)
        else:
            a = seconds(ours, clock)
            b = seconds(baseline, clock)
        out.append(a / b)
    return out


def paired(ours, baseline, repeats: int, calls: int, clock=time.perf_counter) -> list[float]:
    """Per-repeat ratios of summed times of `calls` single calls alternated one by one (ours,
    baseline, baseline, ours, ...): for short operations on a shared machine, where the load
    changes faster than a block of calls takes (one warm-up pair first)."""
    ours(), baseline()
    out = []
    for _ in range(repeats):
        a = b = 0.0
        for k in range(calls):
            if k % 2:
                b += seconds(baseline, clock)
                a += seconds(ours, clock)
            else:
                a += seconds(ours, clock)
                b += seconds(baseline, clock)
        out.append(a / b)
    return out


def load() -> str:
    """The machine's load average and core count, to print next to a table."""
    import os

    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def env_id(name: str) -> str:
    """The registered id of env `name` (e.g. "Poker" -> "clbench/Poker-v9"), whatever its version."""
    from clbench import clbench_env_ids

    return max(i for i in clbench_env_ids() if i.startswith(f"clbench/{name}-v"))


def run_script(main, doc: str) -> None:
    """A bench's command line: `--quick` for fewer repeats; it prints its table and exits 0
    (run_all.py is what judges the ratios)."""
    import argparse

    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    main(quick=p.parse_args().quick)
