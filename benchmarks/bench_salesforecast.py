"""SalesForecast-v6 speed: world generation, workspace start, sandboxed command steps, a reference year.

    python benchmarks/bench_salesforecast.py [--quick]

Targets (2 cores): env creation (world + 12 instances) < 0.5 s, a fresh workspace with its inbox
< 0.2 s, a trivial shell command < 0.15 s (one bwrap start), a scikit-learn import inside the
sandbox < 3 s, one whole reference year (write script, fit the GLM, submit) < 4 s. Prints
medians and their ratio to the target.
"""
from __future__ import annotations

import statistics
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _ratio import run_script  # noqa: E402

ENV = "clbench/SalesForecast-v6"


def _row(what: str, times: list[float], target: float) -> str:
    med = statistics.median(times)
    return f"| {what} | {len(times)} | {med:.3f} s | {target:g} s | {med / target:.2f} |"


def _timed(fn, repeats: int) -> list[float]:
    """Wall seconds of each of `repeats` calls."""
    start = [time.perf_counter()]
    for _ in range(repeats):
        fn()
        start.append(time.perf_counter())
    return [b - a for a, b in zip(start, start[1:])]


def main(quick: bool = False) -> None:
    import gymnasium as gym

    import clbench  # noqa: F401
    from clbench.agent import make_agent
    from clbench.runner import play_instance

    n = 3 if quick else 10
    print(f"{ENV}\n| what | n | median | target | ratio |\n|---|---|---|---|---|")
    print(_row("env creation (world + schedule)", _timed(lambda: gym.make(ENV).close(), n), 0.5))
    env = gym.make(ENV)
    env.reset(seed=0)
    print(_row("fresh workspace + inbox (stateless jump)",
               _timed(lambda: env.reset(options={"instance": "fy2027", "stateless": True}), n), 0.2))
    steps = []
    for _ in range(n):
        env.reset(options={"instance": "fy2027", "stateless": True})
        steps += _timed(lambda: env.step("ls inbox"), 5)
    print(_row("shell step `ls inbox`", steps, 0.15))
    env.reset(options={"instance": "fy2027", "stateless": True})
    print(_row("shell step importing scikit-learn",
               _timed(lambda: env.step("python3 -c 'import sklearn.linear_model'"), max(2, n // 3)), 3.0))

    def reference_year():
        obs, info = env.reset(options={"instance": "fy2031", "stateless": True})
        play_instance(env, make_agent("reference", env), obs, info, [])

    print(_row("one reference year (stateless)", _timed(reference_year, max(2, n // 3)), 4.0))
    env.close()


if __name__ == "__main__":
    run_script(main, __doc__)
