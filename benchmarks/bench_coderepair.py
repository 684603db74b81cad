"""CodeRepair-v6 and sandbox speed: medians of the operations a rollout repeats; fresh worlds.

`python benchmarks/bench_coderepair.py worlds [N]`: per world 1..N (default 20), computed from the
stateless reference's per-issue outcomes (clbench.envs.coderepair.worlds): r_reference and each
fixed guess of the red team's family (house-guesser priors 1-3, the canonical world's published
choices), next to the canonical world's. `... compare RUN.jsonl [oracle]`: a world played in full
(one JSON line per issue: id, reward, steps, solved, met; the first line {"world": N}) against the
computation, issue by issue.

Prints, per available backend (bwrap, docker): a trivial command's round trip, a sandbox's
creation on the tablib checkout, an env reset, and a submission's evaluation (hidden tests in
a fresh checkout); and the docker/bwrap ratios. Run: python benchmarks/bench_coderepair.py

Overhead ratios (issue 34), `ratios()`: a sandbox's command round trip (`sandbox.run("true")`:
for bwrap the runner in the sandbox's long-lived bwrap, the uid drop, bash, the kill of what the
command left, output capture and the result; the control group, rlimits and seccomp filter are
set up once per sandbox) against the plainest way to run the same thing in the same isolation,
alternated repeat by repeat:
- bwrap: `subprocess.run` of bwrap with the sandbox's own namespaces and mounts running `true`
  (target <= 1.2);
- Docker: `docker exec CID true` through the SDK (`container.exec_run`) on the sandbox's own
  container (target <= 1.2), as bwrap's anchor is a bwrap per command. Since issue 34's runner (one
  exec per container, not per command) the round trip is a fraction of that. Reported beside it, with
  no target: the same round trip against the plainest long-lived session, a bare `docker exec -i` of
  bash (another uid) reading `/bin/bash -c true; echo "rc $?"` lines from its stdin, i.e. what the
  runner's isolation costs over a session that has none (no uid drop, no kill of what the command
  left and no wait for it, no reply tags).
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time

import gymnasium as gym

import clbench  # noqa: F401
from pathlib import Path

from clbench.agent import make_agent
from clbench.sandbox.bwrap import bwrap_works
from clbench.sandbox.select import docker_ready

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _ratio import Ratio, not_available, paired, table  # noqa: E402

#: the image of the Docker row: the smallest one `clbench containers build` makes
DOCKER_IMAGE = "clbench/offline-base:bookworm"
BWRAP_DEF = ("bwrap sandbox.run('true') / subprocess.run of bwrap with the same namespaces and mounts "
             "running `true` (the plainest bwrap call in the same isolation)")
DOCKER_DEF = (f"docker sandbox.run('true') / container.exec_run(['true']) (the SDK's `docker exec CID true`) "
              f"on the same running container ({DOCKER_IMAGE})")
SESSION_DEF = (f"docker sandbox.run('true') / a bare `docker exec -i bash` session (uid 2000) on the same running "
               f"container ({DOCKER_IMAGE}) running `/bin/bash -c true; echo \"rc $?\"` lines read from its stdin "
               "(no uid drop, no kill of leftovers, no reply tags)")


def bwrap_ratio(repeats: int, calls: int) -> Ratio:
    from clbench.sandbox.bwrap import BwrapSandbox

    name = "bwrap: command round trip / bare bwrap ... true"
    ok, why = bwrap_works()
    if not ok:
        return not_available(name, 1.2, "lower", why, BWRAP_DEF)
    with tempfile.TemporaryDirectory() as src:
        (Path(src) / "a.txt").write_text("x\n")
        with BwrapSandbox(src) as box:
            full = box.argv("true", box.limits)
            bare = full[: full.index("--")] + ["--", "true"]

            def ours():
                if not box.run("true").ok:
                    raise RuntimeError("`true` failed in the bwrap sandbox")

            samples = paired(ours, lambda: subprocess.run(bare, check=True), repeats, calls)
    return Ratio(name, samples, 1.2, "lower", BWRAP_DEF)


def docker_ratio(repeats: int, calls: int, session_ratios: list[float] | None = None) -> Ratio:
    """The judged ratio (against `docker exec CID true`); given `session_ratios`, the round trip
    against a bare session is measured too and its per-repeat ratios appended there."""
    from clbench.sandbox import Runtime
    from clbench.sandbox.docker_backend import DockerSandbox

    name = "docker: command round trip / docker exec CID true"
    ok, why = docker_ready(Runtime(image=DOCKER_IMAGE))
    if not ok:
        return not_available(name, 1.2, "lower", why, DOCKER_DEF)
    with tempfile.TemporaryDirectory() as src:
        (Path(src) / "a.txt").write_text("x\n")
        with DockerSandbox(src, runtime=Runtime(image=DOCKER_IMAGE)) as box:
            def ours():
                if not box.run("true").ok:
                    raise RuntimeError("`true` failed in the docker sandbox")

            def exec_true():
                if box.container.exec_run(["true"]).exit_code != 0:
                    raise RuntimeError("docker exec true failed")

            samples = paired(ours, exec_true, repeats, calls)
            if session_ratios is None:
                return Ratio(name, samples, 1.2, "lower", DOCKER_DEF)
            api = box.client.api
            exec_id = api.exec_create(box.container.id, ["/bin/bash"], stdin=True, user="2000:2000")["Id"]
            stream = api.exec_start(exec_id, socket=True)
            session = getattr(stream, "_sock", stream)
            session.settimeout(None)

            def bare_session():
                session.sendall(b'/bin/bash -c true; echo "rc $?"\n')
                got = b""
                while not got.endswith(b"rc 0\n"):  # the frame's 8-byte header precedes it
                    chunk = session.recv(4096)
                    if not chunk:
                        raise RuntimeError("the bare docker exec -i bash session ended")
                    got += chunk

            try:
                session_ratios.extend(paired(ours, bare_session, repeats, calls))
            finally:
                session.close()
    return Ratio(name, samples, 1.2, "lower", DOCKER_DEF)


def ratios(quick: bool = False, session_ratios: list[float] | None = None) -> list[Ratio]:
    repeats, calls = (5, 5) if quick else (11, 10)
    return [bwrap_ratio(repeats, calls), docker_ratio(repeats, calls, session_ratios)]


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_backend(backend: str, repeat: int = 5) -> dict[str, float]:
    env = gym.make("clbench/CodeRepair-v6", backend=backend).unwrapped
    try:
        obs, info = env.reset(seed=0)
        sandbox = env._sandbox
        issue = env._issue
        results = {
            "command": median_time(lambda: sandbox.run("true"), repeat * 4),
            "sandbox": median_time(lambda: env.open_sandbox(env._checkout(issue), issue.repo).close(), repeat),
            "reset": median_time(lambda: env.reset(options={"instance": 0, "stateless": True}), repeat),
        }
        oracle = make_agent("oracle", env)

        def solve():
            o, i = env.reset(options={"instance": 0, "stateless": True})
            env.step(oracle.act(o, i))

        results["oracle issue (reset + fix + evaluation)"] = median_time(solve, repeat)
        return results
    finally:
        env.close()


def main(quick: bool = False) -> list[Ratio]:
    rows: dict[str, dict[str, float]] = {}
    if bwrap_works()[0]:
        rows["bwrap"] = bench_backend("bwrap")
    from clbench.env import load_task_spec
    from clbench.sandbox import Runtime

    images = [r["image"] for r in load_task_spec("coderepair")["repos"].values()]
    if all(docker_ready(Runtime(image=i))[0] for i in images):
        rows["docker"] = bench_backend("docker")
    for backend, results in rows.items():
        for name, seconds in results.items():
            print(f"{backend:7s} {name:42s} median {seconds * 1000:9.1f} ms")
    if len(rows) == 2:
        for name in rows["bwrap"]:
            print(f"ratio docker/bwrap {name:31s} {rows['docker'][name] / rows['bwrap'][name]:6.2f}")
    session: list[float] = []
    out = ratios(quick, session)
    print(table(out))
    if session:
        print(f"reported, no target: {SESSION_DEF}: median {statistics.median(session):.2f} "
              f"({min(session):.2f}-{max(session):.2f}, {len(session)} repeats)")
    return out


def worlds(count: int = 20) -> dict:
    """The computed per-world table (see the module docstring); returns {world: means}."""
    from clbench.envs.coderepair.coderepair_env import CodeRepairEnv
    from clbench.envs.coderepair.worlds import REFERENCE_OUTCOMES, era_guesses, family_means

    rows = {}
    for seed in [None, *range(1, count + 1)]:
        env = CodeRepairEnv(backend="bwrap", world_seed=seed)
        rows["canonical" if seed is None else seed] = means = family_means(env, REFERENCE_OUTCOMES)
        print(f"{'canonical' if seed is None else seed:>9} {era_guesses(env)} "
              + " ".join(f"{k}={v:.4f}" for k, v in means.items()))
    fresh = [r for k, r in rows.items() if k != "canonical"]
    for name in fresh[0]:
        vals = [r[name] for r in fresh]
        print(f"worlds 1-{count} {name:26s} mean {statistics.mean(vals):.4f} range [{min(vals):.4f}, {max(vals):.4f}]")
    best = [max(v for k, v in r.items() if k != "reference") for r in fresh]
    print(f"worlds 1-{count} best family guess        mean {statistics.mean(best):.4f} range [{min(best):.4f}, "
          f"{max(best):.4f}]; below the reference in {sum(b < r['reference'] for b, r in zip(best, fresh))} of {count}")
    return rows


def compare(path: str, agent: str = "reference") -> bool:
    """A stateless pass of the reference (or the oracle) played in full against the computation, issue by
    issue: resolved or not, the conventions met (the drawn ones its guess matches, and test-behaviour) and
    the steps (the reference's search can take a step more or less on a loaded machine: reported apart)."""
    import json

    from clbench.envs.coderepair import house
    from clbench.envs.coderepair.coderepair_env import CodeRepairEnv
    from clbench.envs.coderepair.worlds import REFERENCE_OUTCOMES, Outcome, era_guesses, issue_eras

    lines = [json.loads(line) for line in open(path)]
    env = CodeRepairEnv(backend="bwrap", world_seed=lines[0]["world"])
    truth, eras, ok, played, computed = era_guesses(env), issue_eras(env), True, [], []
    for row in lines[1:]:
        if agent == "oracle":  # the true fix, every convention of the world, one step
            out, met = Outcome(True, 1, True), len(house.NAMES)
        else:
            out = REFERENCE_OUTCOMES.get(row["id"])
            met = sum(t == 0 for t in truth[eras[row["id"]]]) + 1
        want = house.reward(met, out.steps, env.max_steps) if out else 0.0
        same = bool(row["solved"]) == bool(out) and (not out or len(row["met"]) == met)
        ok &= same
        played.append(row["reward"])
        computed.append(want)
        steps = "" if not out or row["steps"] == out.steps else f" (steps {row['steps']}, recorded {out.steps})"
        print(f"{row['id']:12s} played {row['reward']:.4f} computed {want:.4f} "
              f"{'same outcome' if same else 'DIFFERENT OUTCOME'}{steps}")
    print(f"mean over {len(played)}: played {statistics.mean(played):.4f} computed {statistics.mean(computed):.4f}")
    return ok


if __name__ == "__main__":
    if sys.argv[1:2] == ["worlds"]:
        worlds(int(sys.argv[2]) if len(sys.argv) > 2 else 20)
    elif sys.argv[1:2] == ["compare"]:
        sys.exit(0 if compare(sys.argv[2], *sys.argv[3:4]) else 1)
    else:
        from _ratio import run_script

        run_script(main, __doc__)
