"""Ray on a 2-node local cluster against the local process pool, same jobs, same worker count.

    python benchmarks/bench_ray.py [--quick]

Starts its own cluster: `ray start --head` (1 CPU) plus a second `ray start --address=...` node
(1 CPU) on this machine, with token authentication on every party (a fresh token in RAY_AUTH_TOKEN,
RAY_AUTH_MODE=token), and stops exactly those processes at the end (`clbench.executors.RayLifeline`;
`ray stop` would stop every Ray on the machine). Each repeat runs the same `clbench rollout`
command twice as a fresh process, once with `--workers 2` on the local pool and once with
`--executor ray --ray-address` on the cluster, alternating which goes first.

Ratios (lower is better; target 1.2): wall time of the Ray run / the local-pool run (80 rollouts);
and per instance: (Ray's 80-rollout time - its 20-rollout time) / (the same for the local pool),
each per repeat. The fixed cost per run (the two sides' difference, extrapolated to no instances)
is printed beside them.

Why runs this long: a Ray job's first record reached the driver 4.6-5.5 s after it was submitted
(the cluster starts a new driver's workers afresh, and on these 2 shared CPUs they start beside
the driver, which plays jobs meanwhile). A 20-rollout run takes ~4 s on the local pool, so at 20
rollouts the driver alone had played 17 of the 20 jobs before Ray's workers reported, and 20 - 5
rollouts measured the driver playing alone against two pool workers: 1.9-2.1x, whatever Ray's
cost per instance. Scale-out is for runs long enough that Ray's workers are up for most of them:
at 240 and 60 rollouts (~23 and ~7 s on the local pool) both runs have Ray's workers playing most
of the time, the difference is the steady-state cost per instance, and the wall ratio of the
240-rollout run still carries the start-up once (at 80 rollouts, ~8 s, the start-up alone made it
1.4-1.7). On a loaded machine the two sides are alike (80 rollouts: Ray 0.92x the pool at a load
of 3-5), since the pool's workers then wait for a CPU as Ray's do.
"""
from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _ratio import Ratio, env_id, run_script, table  # noqa: E402

#: 240 stateful rollouts + one stateless pass of 90 instances each (21,690 instances, ~23 s on the local
#: pool): a run worth scaling out (docstring). A run of 60 rollouts is measured too, so the fixed cost
#: of each side (driver start, Ray's connection, workers that start and import Ray) and its cost per
#: instance are told apart. At 80 and 20 rollouts (8 and 4 s on the local pool) the wall ratio was
#: mostly Ray's start (~5 s: 1.4-1.7), and the 20-rollout Ray run was mostly the driver playing alone.
ENV, ROLLOUTS, SMALL = "SpectrumMonitor", 240, 60
TARGET = 1.2
WALL_DEFINITION = (f"wall seconds of a fresh `clbench rollout --env {ENV} --agent reference --rollouts {ROLLOUTS} "
                   "--workers 2 --executor ray --ray-address` process on a 2-node local cluster (1 CPU each, token "
                   "authentication) / the same command on the local pool (`--workers 2`); the sides alternate, "
                   "median of the per-repeat ratios")
INSTANCE_DEFINITION = (f"(Ray's {ROLLOUTS}-rollout wall seconds - its {SMALL}-rollout wall seconds) / (the same for the "
                       "local pool), per repeat: the cost per instance, each side's fixed cost (start, connection, "
                       "worker start) taken out")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray(*args: str, env: dict) -> None:
    done = subprocess.run([sys.executable, "-m", "ray.scripts.scripts", *args], env=env,
                          capture_output=True, text=True, timeout=300)
    if done.returncode:
        raise RuntimeError(f"ray {' '.join(args)} failed: {done.stderr.strip()[-600:]}")


class Cluster:
    """A head and a second node, 1 CPU each; every one of their processes ends with `close`."""

    def __init__(self, tmp: str):
        from clbench.executors import RayLifeline

        self.port = _free_port()
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        self.lifeline = RayLifeline()  # tags what `ray start` starts; kills it when this process ends
        env = {**self.env, **{k: v for k, v in os.environ.items() if k.startswith("CLBENCH_RAY")}}
        try:
            _ray("start", "--head", f"--port={self.port}", "--num-cpus=1", "--include-dashboard=false",
                 "--disable-usage-stats", f"--temp-dir={tmp}", env=env)
            _ray("start", f"--address=127.0.0.1:{self.port}", "--num-cpus=1", "--disable-usage-stats", env=env)
        except BaseException:
            self.close()
            raise
        finally:
            self.lifeline.untag()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.lifeline.close()
        # `ray stop` would remove the address file that lets a bare ray.init() attach here
        current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
        if current.exists() and current.read_text().strip().endswith(f":{self.port}"):
            current.unlink(missing_ok=True)


def _rollout(out: str, env: dict, rollouts: int, *extra: str) -> float:
    cmd = [sys.executable, "-m", "clbench", "rollout", "--env", env_id(ENV), "--agent", "reference",
           "--rollouts", str(rollouts), "--workers", "2", "--quiet", "--out", out, *extra]
    t = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    took = time.perf_counter() - t
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd[2:])} failed: {done.stderr.strip()[-600:]}")
    return took


def measure(quick: bool = False) -> dict[tuple[str, int], list[float]]:
    """Seconds per repeat for (side, rollouts), sides alternated."""
    repeats = 2 if quick else 5
    times: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="clbench-bench-ray-") as tmp:
        cluster = Cluster(tmp)
        extra = {"local": (), "ray": ("--executor", "ray", "--ray-address", cluster.address)}
        try:
            for side in extra:  # warm-up (first imports, the cluster's first workers), not counted
                _rollout(f"{tmp}/warm-{side}", cluster.env, 1, *extra[side])
            for i in range(repeats):
                for rollouts in (ROLLOUTS, SMALL):
                    for side in (("local", "ray") if i % 2 == 0 else ("ray", "local")):
                        times.setdefault((side, rollouts), []).append(
                            _rollout(f"{tmp}/{side}-{rollouts}-{i}", cluster.env, rollouts, *extra[side]))
        finally:
            cluster.close()
    return times


def _ratios(times: dict) -> list[Ratio]:
    ray, local = times["ray", ROLLOUTS], times["local", ROLLOUTS]
    ray_small, local_small = times["ray", SMALL], times["local", SMALL]
    what = "--executor ray, 2-node local cluster (1 CPU each) / local pool, 2 workers"
    return [Ratio(f"{what}; wall time of `clbench rollout` {ENV} {ROLLOUTS} rollouts",
                  [r / b for r, b in zip(ray, local)], TARGET, "lower", WALL_DEFINITION),
            Ratio(f"{what}; time per instance ({ROLLOUTS} - {SMALL} rollouts)",
                  [(r - rs) / (b - bs) for r, rs, b, bs in zip(ray, ray_small, local, local_small)], TARGET, "lower",
                  INSTANCE_DEFINITION)]


def ratios(quick: bool = False) -> list[Ratio]:
    return _ratios(measure(quick))


def main(quick: bool = False) -> list[Ratio]:
    import statistics

    times = measure(quick)
    for (side, rollouts), xs in sorted(times.items()):
        print(f"{side}, {rollouts} rollouts: median {statistics.median(xs):.2f} s {sorted(round(x, 2) for x in xs)}")
    per = {side: [(big - small) / (ROLLOUTS - SMALL) for big, small in zip(times[side, ROLLOUTS], times[side, SMALL])]
           for side in ("local", "ray")}
    fixed = [(times["ray", SMALL][i] - SMALL * per["ray"][i]) - (times["local", SMALL][i] - SMALL * per["local"][i])
             for i in range(len(per["ray"]))]
    print(f"Ray's fixed cost per run over the local pool's: median {statistics.median(fixed):.2f} s "
          f"{sorted(round(x, 2) for x in fixed)}")
    found = _ratios(times)
    print(table(found))
    return found


if __name__ == "__main__":
    run_script(main, __doc__)
