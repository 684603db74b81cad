"""Runner overhead: `clbench rollout` against the bare env + agent work, on SpectrumMonitor.

    python benchmarks/bench_runner.py [--quick]

Both sides run in this process, alternately. The command side is `clbench rollout --agent
reference --workers 1` (5 stateful rollouts and the stateless pass, every record, trajectory and
agent checkpoint written, then the metrics), run through the CLI entry point with a fresh env. The
bare side plays the same rollouts and stateless instances with the same agents and seeds and
writes nothing. Targets: command <= 1.3x bare; and the runner linear in the schedule length: on a
schedule twice as long (every variant with twice the scans) the runner's own time (command minus
bare) <= 2.2x its time on the default schedule. The runner's own time is what is compared because
the reference agent itself is superlinear (it matches each scan against all it has seen); the
whole command's 2x/1x ratio is printed too. The runner's own time is a small difference of two
large times, so it is taken in CPU time of this process (user + system): on a shared machine the
wall-clock noise of either side (other processes' scheduling) is as large as the difference itself.
The overhead ratio is wall time, as the target says (its CPU-time value and the wall-clock growth
are printed for reference).
"""
from __future__ import annotations

import contextlib
import io
import statistics
import sys
import tempfile
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _ratio import Ratio, env_id, table, run_script  # noqa: E402

DOUBLE_ENV = "clbench-bench/SpectrumMonitorDouble"
ROLLOUTS = 5


def _register_double() -> None:
    """SpectrumMonitor whose default schedule has twice the scans per variant."""
    import gymnasium as gym

    from clbench.envs.spectrummonitor.spectrummonitor_env import SpectrumMonitorEnv

    class SpectrumMonitorDouble(SpectrumMonitorEnv):
        def _build_schedule(self, name: str):
            doubled = [dict(v, scans=2 * v["scans"]) for v in self.spec_data["schedules"][name]]
            # a copy: the loaded spec is cached and shared with the real env
            self.spec_data = dict(self.spec_data, schedules=dict(self.spec_data["schedules"], **{name: doubled}))
            return super()._build_schedule(name)

    if DOUBLE_ENV not in gym.registry:
        gym.register(DOUBLE_ENV, entry_point=SpectrumMonitorDouble)


def command(env_id: str) -> None:
    """`clbench rollout` in this process (inline worker), on a fresh env, into a fresh directory."""
    from clbench.cli import main
    from clbench.runner import close_cached_envs

    close_cached_envs()
    with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
        rc = main(["rollout", "--env", env_id, "--agent", "reference", "--out", f"{out}/run",
                   "--rollouts", str(ROLLOUTS), "--workers", "1", "--quiet"])
    if rc:
        raise RuntimeError(f"clbench rollout exited {rc}")


def bare(env_id: str) -> None:
    """The same episodes with the same agents and seeds; nothing recorded."""
    from clbench.agent import make_agent
    from clbench.runner import make_env

    env = make_env(env_id)

    def play(agent, obs, info):
        agent.begin_instance(obs, info)
        while True:
            obs, reward, term, trunc, info = env.step(agent.act(obs, info))
            if term or trunc:
                break
        agent.end_instance(reward, info)

    for k in range(ROLLOUTS):
        agent = make_agent("reference", env, seed=k)
        obs, info = env.reset(seed=k)
        for pos in range(len(env.unwrapped.schedule)):
            if pos:
                obs, info = env.reset()
            play(agent, obs, info)
            agent.state_dict()  # the agent's own cost of producing its state is not the runner's
    for inst in env.unwrapped.schedule.order(0):
        agent = make_agent("reference", env, seed=0)
        play(agent, *env.reset(seed=0, options={"instance": inst.instance_id, "stateless": True}))
    env.close()


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def ratios(quick: bool = False) -> list[Ratio]:
    env = env_id("SpectrumMonitor")
    _register_double()
    repeats = 3 if quick else 7
    overhead, cpu_overhead, growth, wall_growth, whole = [], [], [], [], []
    command(env), bare(env)  # warm-up
    for _ in range(repeats):
        (b1, cb1), (c1, cc1) = timed(lambda: bare(env)), timed(lambda: command(env))
        (b2, cb2), (c2, cc2) = timed(lambda: bare(DOUBLE_ENV)), timed(lambda: command(DOUBLE_ENV))
        overhead.append(c1 / b1)
        cpu_overhead.append(cc1 / cb1)
        growth.append((cc2 - cb2) / (cc1 - cb1))
        wall_growth.append((c2 - b2) / (c1 - b1))
        whole.append(c2 / c1)
    print(f"whole command, 2x schedule / 1x schedule: median {statistics.median(whole):.2f} "
          f"(bare env+agent: the same ratio includes the agent's own growth)")
    print(f"for reference: clbench rollout / bare in CPU time: median {statistics.median(cpu_overhead):.3f}; "
          f"the runner's own time, 2x / 1x, in wall-clock time: median {statistics.median(wall_growth):.2f}")
    return [Ratio("runner: clbench rollout / bare env+agent (SpectrumMonitor)", overhead, 1.3, "lower"),
            Ratio("runner: own CPU time (command - bare), 2x schedule / 1x schedule", growth, 2.2, "lower")]


def main(quick: bool = False) -> list[Ratio]:
    out = ratios(quick)
    print(table(out))
    return out


if __name__ == "__main__":
    run_script(main, __doc__)
