"""Contracts behind the speed work (issue 18): what must stay true, not how fast it is.

Speed targets live in benchmarks/ (run_all.py); here: `import clbench` and the env modules stay
free of heavy imports, the numpy Kaplan-Meier equals lifelines', and the agent-state journal
keeps checkpoints exact, SIGKILL-safe and bounded.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from clbench.run_dir import _JOURNAL_MIN_BYTES, _JOURNAL_SLACK, append_checkpoint, load_checkpoint, state_line

HEAVY = ("pandas", "lifelines", "duckdb", "docker", "scipy", "sklearn", "matplotlib", "texasholdem", "openai", "ray")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"import sys\n{code}\nprint(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_import_clbench_loads_no_env_dependency():
    loaded = _modules_after("import clbench\nassert clbench.clbench_env_ids()")
    assert "clbench.registry" in loaded  # the probe does see clbench's own modules
    assert sorted(m for m in HEAVY if m in loaded) == []


@pytest.mark.parametrize("module, allowed", [
    ("clbench.envs.cohortstudies.cohortstudies_env", {"duckdb"}),  # pandas, lifelines, scipy.stats: only when building
    ("clbench.envs.dbexplore.dbexplore_env", {"duckdb"}),  # pandas: only to build the database files
])
def test_env_modules_import_only_what_a_cache_hit_needs(module, allowed):
    loaded = _modules_after(f"import {module}")
    assert module in loaded
    assert sorted(m for m in HEAVY if m in loaded and m not in allowed) == []


def _lifelines_km(months, events, points):
    from lifelines import KaplanMeierFitter

    fit = KaplanMeierFitter().fit(np.asarray(months, dtype=float), np.asarray(events, dtype=bool))
    values = fit.survival_function_at_times(list(points)).to_numpy()
    return [float(v) if t <= max(months) else None for v, t in zip(values, points)]


def test_numpy_kaplan_meier_equals_lifelines():
    pytest.importorskip("lifelines")
    from clbench.envs.cohortstudies.km import km_at

    rng = np.random.default_rng(7)
    cases = [([5.0, 5.0, 5.0], [True, True, True]),  # everyone dies at once: survival 0
             ([0.0, 0.0, 3.0, 8.0], [True, False, True, False]),  # deaths at time 0
             ([2.0, 4.0, 6.0], [False, False, False])]  # all censored: survival 1
    for _ in range(200):
        n = int(rng.integers(1, 400))
        months = np.round(rng.exponential(24, n), int(rng.integers(0, 3)))  # rounding makes ties
        cases.append((months, rng.random(n) < rng.random()))
    for months, events in cases:
        points = [0, 12, 24, 36, float(np.max(months)), float(np.median(months)), float(np.max(months)) + 1]
        ours, ref = km_at(months, events, points), _lifelines_km(months, events, points)
        assert [v is None for v in ours] == [v is None for v in ref]
        assert all(abs(a - b) <= 1e-9 for a, b in zip(ours, ref) if a is not None)
    assert km_at([], [], [12]) == [None]


def test_checkpoint_round_trips_state_exactly(tmp_path):
    path = tmp_path / "state" / "stateful-r0.jsonl"
    state = {"z": [0.1 + 0.2, 1e-300, -0.0, math.nan, math.inf], "a": {"nested": [1, "two", None, True]}}
    for pos in range(3):
        append_checkpoint(path, state_line(pos, dict(state, pos=pos)))
    saved = load_checkpoint(path)
    assert saved["position"] == 2
    got = saved["state"]
    assert list(got) == ["z", "a", "pos"]  # key order kept
    assert got["z"][:3] == [0.1 + 0.2, 1e-300, -0.0] and math.copysign(1, got["z"][2]) == -1
    assert math.isnan(got["z"][3]) and got["z"][4] == math.inf
    assert got["a"] == state["a"] and got["pos"] == 2


def test_torn_last_checkpoint_is_skipped_and_the_next_one_starts_a_line(tmp_path):
    path = tmp_path / "stateful-r0.jsonl"
    append_checkpoint(path, state_line(0, {"k": [1, 2]}))
    whole = state_line(1, {"k": [1, 2, 3]})
    with open(path, "ab") as fh:  # a writer killed mid-line
        fh.write(whole[: len(whole) // 2])
    assert load_checkpoint(path)["position"] == 0
    append_checkpoint(path, state_line(2, {"k": [9]}))
    assert load_checkpoint(path) == {"position": 2, "state": {"k": [9]}}


def test_journal_is_compacted_to_its_newest_checkpoint(tmp_path):
    path = tmp_path / "stateful-r0.jsonl"
    line_size = 64 * 1024
    for pos in range(200):
        append_checkpoint(path, state_line(pos, {"blob": "x" * line_size, "pos": pos}))
        assert path.stat().st_size <= max(_JOURNAL_MIN_BYTES, _JOURNAL_SLACK * line_size) + 2 * line_size
    assert load_checkpoint(path)["state"]["pos"] == 199
    assert not list(tmp_path.glob(".*.tmp"))


def test_checkpoint_of_runs_before_the_journal_still_resumes(tmp_path):
    legacy = tmp_path / "stateful-r0.json"
    legacy.write_text(json.dumps({"position": 4, "state": {"seen": [1, 2]}}, indent=2))
    assert load_checkpoint(tmp_path / "stateful-r0.jsonl") == {"position": 4, "state": {"seen": [1, 2]}}
    assert load_checkpoint(tmp_path / "stateful-r1.jsonl") is None


def _stateful_records(run_dir) -> list[str]:
    from clbench.results import load_records

    return sorted(json.dumps({k: v for k, v in r.items() if k != "wall_time"}, sort_keys=True)
                  for r in load_records(run_dir) if r["mode"] == "stateful")


def test_resume_from_an_older_checkpoint_plays_the_rest_again_exactly(tmp_path, monkeypatch):
    """Checkpoints are rationed (CHECKPOINT_SHARE); a run killed several instances after its newest
    checkpoint resumes from it and ends with the records of an uninterrupted run."""
    import clbench.runner as runner
    from clbench import clbench_env_ids
    from clbench.results import RESULTS_FILE
    from clbench.run_dir import state_path, trajectory_path
    from clbench.rollout import run
    from clbench.runner import RunConfig

    env_id = max(i for i in clbench_env_ids() if i.startswith("clbench/SpectrumMonitor-"))

    def config(out):
        return RunConfig(env_id, "reference", str(out), rollouts=1, mode="stateful", workers=1,
                         env_kwargs={"schedule": "short"})

    run(config(tmp_path / "whole"), say=lambda m: None, quiet=True)
    cut = tmp_path / "cut"
    monkeypatch.setattr(runner, "CHECKPOINT_SHARE", 0.0)  # no budget: only the first instance is saved
    run(config(cut), say=lambda m: None, quiet=True)
    monkeypatch.undo()
    task = "spectrummonitor"
    assert load_checkpoint(state_path(cut, task, "reference", 0))["position"] == 0
    results = cut / RESULTS_FILE  # killed after position 4: later records never written
    kept = [line for line in results.read_text().splitlines() if json.loads(line)["position"] <= 4]
    results.write_text("\n".join(kept) + "\n")
    run(config(cut), say=lambda m: None, quiet=True, resume=True)
    assert _stateful_records(cut) == _stateful_records(tmp_path / "whole")
    traj = trajectory_path(cut, task, "reference", "stateful", 0).read_text().splitlines()
    assert [json.loads(t)["position"] for t in traj if '"event":"reset"' in t] == list(range(8))


def test_cohort_expressions_in_one_query_read_as_each_on_its_own():
    """estimate_survival_by_group evaluates its expressions in one query (issue 34): the text must be
    what each expression gives on its own, errors included (a parse error, a runtime error that
    fails the shared query, a duplicate)."""
    import gymnasium as gym

    from clbench import clbench_env_ids

    env = gym.make(max(i for i in clbench_env_ids() if i.startswith("clbench/CohortStudies-"))).unwrapped
    try:
        env.reset(seed=0, options={"instance": env.schedule.variants[0].instances[0].instance_id})
        time_col = env.studies[env.slot.instance.payload["study"]].time["column"]
        exprs = ["'all'", f'CASE WHEN "{time_col}" < 12 THEN \'early\' ELSE \'late\' END', "CASE WHEN (",
                 f'CAST(\'x\' || "{time_col}" AS INTEGER)', f'CASE WHEN "{time_col}" > 24 THEN \'long\' END', "'all'"]
        together = env._estimate({"group_expressions": exprs}).observation.split("\n\n")
        alone = [env._estimate({"group_expression": e}).observation.split("\n\n") for e in exprs]
        assert together == [alone[0][0], *(a[1] for a in alone)]
        assert sum("Error:" in block for block in together) == 2  # the parse error and the runtime error
    finally:
        env.close()


def test_dbexplore_cached_load_imports_no_pandas():
    """Entering questions on built databases needs DuckDB only: pandas (1-2 s to import) is for builds."""
    import gymnasium as gym

    from clbench import clbench_env_ids

    env_id = max(i for i in clbench_env_ids() if i.startswith("clbench/DBExplore-"))
    env = gym.make(env_id)
    env.unwrapped.database_paths()  # built (or found) in this process, with pandas
    env.close()
    loaded = _modules_after(f"import clbench, gymnasium as gym\nenv = gym.make({env_id!r})\nenv.reset(seed=0)\n"
                            "env.reset(options={'instance': 'q21', 'stateless': True})\n"
                            "env.step('QUERY: SELECT 1')\nenv.close()")
    assert "clbench.envs.dbexplore.dbexplore_env" in loaded
    assert "pandas" not in loaded


def test_a_query_counted_from_its_parts_is_the_query_counted_whole():
    """ACC counts its transcript's words once (filed and queried): the query's features from the
    transcript's and the state's equal those of the joined text, collisions and case included."""
    import random

    from clbench.agents.llm.memory.index import _hash, features, joined

    rng = random.Random(0)
    words = ["scan", "Channel", "ÉTAT", "reward", "a1", "x", "ß", "İstanbul", "chan_9", "0.25", "scan"]
    for _ in range(50):
        parts = [" ".join(rng.choice(words) + rng.choice(["", ".", ",", "-", "_"]) for _ in range(rng.randint(0, 30)))
                 for _ in range(rng.randint(1, 3))]
        whole, split = _hash("\n".join(parts)), _hash(joined(*map(features, parts)))
        assert whole[0].tolist() == split[0].tolist() and whole[1].tolist() == split[1].tolist()
