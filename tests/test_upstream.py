"""The original CL-Bench v1.0 results: conversion into clbench run directories and the upstream
conventions, checked against the numbers the paper published.

The real result files live outside the repository (../shared/upstream-clbench-v1, or
$CLBENCH_UPSTREAM_DIR); tests that need them skip with the reason when they are absent. The
published numbers are parsed from that folder's README, so they are checked independently of the
constants in clbench.upstream. The first tests use hand-made documents and always run.
"""
from __future__ import annotations

import gzip
import json
import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from clbench import upstream
from clbench.cli import main
from clbench.results import append_lines, load_metadata, load_records, write_json_atomic
from clbench.runcard import compute

UPSTREAM = upstream.default_dir()
needs_upstream = pytest.mark.skipif(
    UPSTREAM is None,
    reason=f"upstream CL-Bench v1.0 results not found (expected ../shared/upstream-clbench-v1 beside the "
           f"repository, or ${upstream.ENV_VAR})")
SYSTEMS = ["claude-code-sonnet-4.6", "icl-claude-sonnet-4.6", "icl-gpt-5.4", "mem0-gpt-5.4"]
SLUG = {v: k for k, v in upstream.DISPLAY_NAMES.items()}


# ----------------------------------------------------------------------------- hand-made data

def outcome(iid, index, reward, ref=None, kl=None, cost=0.01, study="S"):
    meta = {"study_name": study}
    if ref is not None:
        meta.update(mean_reference_kl=ref, mean_kl_divergence=kl)
    return {"instance_id": iid, "instance_index": index, "reward": reward, "success": reward > 0,
            "raw_metric_name": "kl_skill_score", "raw_metric_value": reward, "raw_metric_higher_is_better": True,
            "metadata": meta, "cost_usd": cost, "latency_seconds": 1.0}


def cohort_doc():
    """Two studies of two instances; rollout 1 permutes within studies."""
    ids = ["cohort_studies:a1", "cohort_studies:a2", "cohort_studies:b1", "cohort_studies:b2"]
    kls = {ids[0]: (0.10, 0.05), ids[1]: (0.10, 0.20), ids[2]: (0.08, 0.02), ids[3]: (0.06, 0.06)}
    study = {i: i.split(":")[1][0].upper() for i in ids}

    def oc(iid, pos, kl_scale=1.0):
        ref, kl = kls[iid]
        kl *= kl_scale
        return outcome(iid, pos, max(0.0, 1 - kl / ref), ref, kl, study=study[iid])

    def usage(cost, tokens):
        return {"interaction": {"call_count": 1, "cost_usd": cost, "input_tokens": tokens, "output_tokens": 5,
                                "cached_input_tokens": 0, "reasoning_tokens": 0}}

    baseline = [oc(i, 0) for i in ids]
    traces = [{"instance_outcomes": [o], "interactions": [{"query": {"instance_id": o["instance_id"]},
                                                           "usage": usage(0.01, 100)}]} for o in baseline]
    orders = [ids, [ids[1], ids[0], ids[3], ids[2]]]
    runs = []
    for k, order in enumerate(orders):
        outs = [oc(iid, p, 0.5) for p, iid in enumerate(order)]
        inter = [{"query": {"instance_index": p}, "usage": usage(0.02, 200)} for p in range(4) for _ in range(2)]
        runs.append({"run_index": k, "trace": {"result": {"instance_outcomes": outs}, "interactions": inter}})
    return {"summary": {"sequence_signature": [{"instance_id": i, "instance_index": n} for n, i in enumerate(ids)],
                        "run_mode": "permute"},
            "baseline_trace": {"result": {"instance_outcomes": baseline}, "instance_traces": traces},
            "run_traces": runs}, kls


def test_convert_task_keeps_ids_positions_variants_costs_and_rescores_cohort_in_bits():
    doc, kls = cohort_doc()
    records, params = upstream.convert_task("cohort_studies", doc, "sys")
    assert params["variants"] == [{"name": "A", "instances": 2}, {"name": "B", "instances": 2}]
    sl = [r for r in records if r["mode"] == "stateless"]
    assert [r["position"] for r in sl] == [0, 1, 2, 3]
    permuted = sorted((r for r in records if r["rollout"] == 1 and r["mode"] == "stateful"), key=lambda r: r["position"])
    assert [r["instance_id"][-2:] for r in permuted] == ["a2", "a1", "b2", "b1"]
    assert [r["variant_position"] for r in permuted] == [0, 1, 0, 1]
    for r in records:
        ref, kl = kls[r["instance_id"]]
        kl *= 0.5 if r["mode"] == "stateful" else 1.0
        assert r["reward"] == pytest.approx((ref - kl) / math.log(2))  # signed bits, not clamped
        assert r["upstream_reward"] == pytest.approx(max(0.0, 1 - kl / ref))
        assert r["reward_source"] == "signed_bits"
    assert sl[1]["upstream_reward"] == 0.0 and sl[1]["reward"] < 0  # the clamp hid a loss
    assert permuted[0]["cost"] == 0.01 and permuted[0]["calls"] == 2 and permuted[0]["steps"] == 2
    assert permuted[0]["tokens"] == {"prompt": 400, "completion": 10, "cached": 0, "reasoning": 0}
    assert sl[0]["tokens"]["prompt"] == 100


def test_variants_fall_back_to_one_block_when_not_contiguous():
    ids = ["cohort_studies:x", "cohort_studies:y", "cohort_studies:z"]
    outs = {i: {"metadata": {"study_name": s}} for i, s in zip(ids, ["A", "B", "A"])}
    assert set(upstream.recover_variants("cohort_studies", {}, ids, outs).values()) == {"all"}
    outs[ids[2]]["metadata"]["study_name"] = "B"
    assert upstream.recover_variants("cohort_studies", {}, ids, outs) == dict(zip(ids, ["A", "B", "B"]))


def write_run(path: Path, records: list[dict], tasks: dict, meta_extra: dict | None = None) -> Path:
    write_json_atomic(path / "metadata.json", {"format": 1, "tasks": tasks, "systems": {}, **(meta_extra or {})})
    append_lines(path / "results.jsonl", records)
    return path


def rec(mode, k, iid, pos, reward, up=None, system="s", task="t"):
    return {"task": task, "system": system, "mode": mode, "rollout": k, "instance_id": iid, "position": pos,
            "variant": "v", "reward": reward, **({"upstream_reward": up} if up is not None else {})}


def test_upstream_conventions_formulas_on_hand_made_records(tmp_path):
    # baseline a=0, b=1, c=0 (B = 1); rollout sums 2 and 3 (rollout 1 permuted)
    records = [rec("stateless", 0, i, p, r) for p, (i, r) in enumerate([("a", 0.0), ("b", 1.0), ("c", 0.0)])]
    records += [rec("stateful", 0, i, p, r) for p, (i, r) in enumerate([("a", 1.0), ("b", 1.0), ("c", 0.0)])]
    records += [rec("stateful", 1, i, p, r) for p, (i, r) in enumerate([("c", 1.0), ("a", 1.0), ("b", 1.0)])]
    tasks = {"t": {"r_max": 2.0, "r_reference": 0.5, "instances": 3, "upstream": {"r_external": 1.2}}}
    run = write_run(tmp_path / "r", records, tasks)
    row = upstream.compute(run)["tasks"][0]
    se = np.std([2.0, 3.0], ddof=1) / math.sqrt(2)
    assert row["cumulative_reward"]["mean"] == pytest.approx(2.5) and row["cumulative_reward"]["se"] == pytest.approx(se)
    assert row["cumulative_gain"]["mean"] == pytest.approx(1.5)
    assert row["normalized_gain"]["mean"] == pytest.approx(1.5 / (6 - 1))
    assert row["normalized_reward"]["mean"] == pytest.approx((2.5 - 1.2) / (6 - 1.2))
    # position pairing: rollout 1 gains by position are 1-0, 1-1, 1-0 instead of 1-0, 1-0, 1-1 by id
    curve = upstream.position_paired_cumulative_gain(load_records(run), "t", "s")
    assert curve == pytest.approx([1.0, 1.0, 1.5])
    by_id = compute(run, n_boot=100)["tasks"][0]["curves"]["cumulative_gain"]["mean"]
    assert by_id == pytest.approx([1.0, 1.5, 1.5]) and by_id[-1] == pytest.approx(curve[-1])


def test_upstream_conventions_use_upstream_reward_and_headline_only_tasks(tmp_path):
    records = [rec("stateless", 0, "a", 0, -1.0, up=0.0), rec("stateful", 0, "a", 0, 5.0, up=1.0)]
    tasks = {"t": {"r_max": 2.0, "r_reference": 0.0, "instances": 1, "upstream": {"r_external": 0.0}},
             "h": {"r_max": 1.0, "r_reference": 0.3, "instances": 10, "upstream": {"r_external": 3.0}}}
    extra = {"systems": {"s": {"name": "s"}},
             "upstream": {"summary_only": {"h": {"cumulative_reward": 5.0, "baseline_sum": 4.0, "source": "x"}}}}
    result = upstream.compute(write_run(tmp_path / "r", records, tasks, extra))
    rows = {r["task"]: r for r in result["tasks"]}
    assert rows["t"]["cumulative_reward"]["mean"] == 1.0 and rows["t"]["normalized_gain"]["mean"] == 0.5
    assert rows["h"]["normalized_gain"]["mean"] == pytest.approx(1 / 6)
    assert rows["h"]["normalized_reward"]["mean"] == pytest.approx(2 / 7) and rows["h"]["rollouts"] is None
    assert result["aggregate"]["s"]["normalized_gain"] == pytest.approx((0.5 + 1 / 6) / 2)


# ----------------------------------------------------------------------------- task mappings

def test_task_mappings_are_found_through_the_registry():
    import importlib

    from clbench import registry

    found = upstream.tasks()
    assert sorted(found) == sorted(upstream.R_MAX) and len(found) == 6
    modules = registry.env_modules()
    for name, t in found.items():
        package = t.module.rsplit(".", 1)[0]
        assert package in modules and t.module == f"{package}.upstream"
        # the counterpart is the package's own registration, not a second copy of it
        assert [r["id"] for r in importlib.import_module(package).REGISTRATIONS] == [t.env_id]
        assert upstream.COUNTERPARTS[name] == t.env_id and upstream.unit_of(name) == t.unit
        assert t.unit == registry.env_class(t.env_id).reward_unit  # the same unit as its clbench counterpart
    assert "clbench.envs.memoryprobe" in modules
    assert all(t.module != "clbench.envs.memoryprobe.upstream" for t in found.values())  # no counterpart
    assert upstream.unit_of("exploitable_poker") == "BB per hand" and upstream.unit_of("cohort_studies") == "bits"
    assert upstream.unit_of("poker") is None and upstream.unit_of("no_such_task") is None


MAPPING = """from clbench.upstream.task import UpstreamTask

UPSTREAM = UpstreamTask(name="fake_task", r_max=2.0, unit="points", published={"s": (1.0, 0.1, 0.5)})
"""


@pytest.fixture
def fake_envs(tmp_path, monkeypatch, request):
    """A temporary package of env packages: good (a mapping), plain (none), and the `upstream.py`
    of each further one as given; the registry lists them instead of the real ones."""
    from clbench import registry
    from clbench.upstream import mappings

    root = f"fakeenvs_{request.node.name.replace('[', '_').replace(']', '_').replace('-', '_')}"

    def make(**broken: str) -> str:
        files = {"good": MAPPING, "plain": None, **broken}
        (tmp_path / root).mkdir()
        (tmp_path / root / "__init__.py").write_text("")
        for name, text in files.items():
            pkg = tmp_path / root / name
            pkg.mkdir()
            (pkg / "__init__.py").write_text(f"REGISTRATIONS = [{{'id': 'clbench/{name.title()}-v0', 'entry_point': 'x:Y'}}]\n")
            if text is not None:
                (pkg / "upstream.py").write_text(text)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setattr(registry, "env_modules", lambda: [f"{root}.{n}" for n in sorted(files)])
        mappings.tasks.cache_clear()
        return root

    yield make
    mappings.tasks.cache_clear()


def test_a_temporary_env_package_maps_its_task_and_one_without_upstream_py_has_none(fake_envs):
    root = fake_envs()
    found = upstream.tasks()
    assert list(found) == ["fake_task"]
    t = found["fake_task"]
    assert (t.env_id, t.module, t.r_max) == ("clbench/Good-v0", f"{root}.good.upstream", 2.0)
    assert upstream.unit_of("fake_task") == "points" and upstream.R_MAX == {"fake_task": 2.0}
    assert upstream.PUBLISHED_TASKS == {("fake_task", "s"): (1.0, 0.1, 0.5)}


@pytest.mark.parametrize("text, says", [
    ("raise RuntimeError('half-written mapping')", "RuntimeError: half-written mapping"),
    ("import no_such_dependency_of_clbench", "No module named 'no_such_dependency_of_clbench'"),
    ("UPSTREAM = 'x' +", "SyntaxError"),
    ("UPSTREAM = {'name': 'x'}", "must define UPSTREAM = UpstreamTask(...)"),
    (MAPPING, "'fake_task' is already mapped by"),
])
def test_a_broken_upstream_mapping_is_reported_with_its_module(fake_envs, capsys, tmp_path, text, says):
    root = fake_envs(broken=text)
    with pytest.raises(upstream.MappingError) as err:
        upstream.tasks()
    assert f"{root}.broken.upstream" in str(err.value) and says in str(err.value)
    # the CLI names it too, instead of importing with the task's rules silently missing
    system = tmp_path / "runs" / "sys"
    system.mkdir(parents=True)
    with gzip.open(system / "cohort_studies.json.gz", "wt") as fh:
        json.dump(cohort_doc()[0], fh)
    assert main(["import-upstream", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 1
    assert f"{root}.broken.upstream" in capsys.readouterr().err
    assert not (tmp_path / "out" / "sys").exists()


# ----------------------------------------------------------------------------- the real files

def published_from_readme() -> tuple[dict, dict, dict]:
    text = (UPSTREAM / "README.md").read_text()
    per_task = {}
    for task, name, reward, se, gain in re.findall(
            r"^\| (\w+) \| ([^|]+?) \| ([\d.]+) \+- ([\d.]+) \| ([-\d.]+) \|$", text, re.M):
        per_task[(task, SLUG[name])] = (float(reward), float(se), float(gain))
    table1 = " ".join(text[text.index("paper Table 1:"):].split())
    names = "|".join(re.escape(n) for n in SLUG)
    aggregate = {SLUG[n]: (float(a), float(b)) for n, a, b in re.findall(rf"({names}) ([\d.]+) / ([\d.]+)", table1)}
    short = {"spectrum": "blind_spectrum_monitoring", "codebase": "codebase_adaptation", "cohort": "cohort_studies",
             "database": "database_exploration", "poker": "exploitable_poker", "sales": "sales_prediction"}
    maxima = " ".join(text[text.index("r_max per instance"):].split())
    r_max = {short[k]: float(v) for k, v in re.findall(r"(spectrum|codebase|cohort|database|poker|sales) (\d+(?:\.\d+)?)", maxima)[:6]}
    return per_task, aggregate, r_max


def artifact(system: str, task: str) -> dict:
    with gzip.open(UPSTREAM / "runs" / system / f"{task}.json.gz", "rt") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("upstream") / "runs" / "upstream"
    assert main(["import-upstream", str(UPSTREAM / "runs"), "--out", str(out)]) == 0
    return out


@needs_upstream
def test_readme_facts_match_the_module_constants():
    per_task, aggregate, r_max = published_from_readme()
    assert len(per_task) == 9 and len(aggregate) == 4
    assert per_task == upstream.PUBLISHED_TASKS
    assert aggregate == upstream.PUBLISHED_AGGREGATE
    assert r_max == upstream.R_MAX


@needs_upstream
def test_import_writes_one_run_directory_per_system(imported):
    assert sorted(p.name for p in imported.iterdir()) == SYSTEMS
    meta = load_metadata(imported / "icl-gpt-5.4")
    assert upstream.is_upstream_import(meta)
    assert meta["upstream"]["summary_only"]["exploitable_poker"]["cumulative_reward"] == 95.76
    for system in SYSTEMS:
        meta = load_metadata(imported / system)
        assert meta["tasks"]["exploitable_poker"]["upstream"]["r_external"] == 133.6
        assert meta["tasks"]["cohort_studies"]["r_max"] == 0.162202


@needs_upstream
def test_published_per_task_numbers_reproduce_to_three_decimals(imported):
    per_task, _, _ = published_from_readme()
    rows = {(r["task"], r["system"]): r for s in SYSTEMS for r in upstream.compute(imported / s)["tasks"]}
    for key, (reward, se, gain) in per_task.items():
        row = rows[key]
        got = (row["cumulative_reward"]["mean"], row["cumulative_reward"]["se"], row["cumulative_gain"]["mean"])
        assert tuple(round(x, 3) for x in got) == (reward, se, gain), key


@needs_upstream
def test_published_aggregates_reproduce_to_three_decimals(imported):
    _, aggregate, _ = published_from_readme()
    for system, (nr, ng) in aggregate.items():
        agg = upstream.compute(imported / system)["aggregate"][system]
        assert len(agg["tasks"]) == 6
        # Table 1 prints percent with one decimal: three decimals of the fraction
        assert (round(100 * agg["normalized_reward"], 1), round(100 * agg["normalized_gain"], 1)) == (nr, ng), system


@needs_upstream
def test_compare_prints_the_four_systems_with_the_published_aggregates(imported, capsys):
    _, aggregate, _ = published_from_readme()
    assert main(["compare", *sorted(str(p) for p in imported.iterdir())]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 4
    ranked = [SLUG[line.split(" | ")[1]] for line in rows]
    assert ranked == sorted(aggregate, key=lambda s: -aggregate[s][0])
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        nr, ng = aggregate[SLUG[cells[1]]]
        assert cells[-3:-1] == [f"{nr:.1f}", f"{ng:.1f}"]


EXPECTED_VARIANTS = {
    "blind_spectrum_monitoring": [("five_ch_wide", 30), ("five_plus_four_mixed", 30), ("full_grid_active", 30)],
    "codebase_adaptation": [("jazzband__tablib", 9), ("jd__tenacity", 10)],
    "cohort_studies": [("HERALD", 4), ("MERIDIAN", 4), ("MOSAIC", 4), ("FORGE", 4), ("CADENCE", 4)],
    "database_exploration": [("pre-migration", 20), ("post-migration", 20)],
    "exploitable_poker": [("stage0-calling_station", 20), ("stage1-loose_aggressive", 30),
                          ("stage2-calling_station", 10), ("stage3-fit_or_fold", 35), ("stage4-loose_aggressive", 25)],
    "sales_prediction": [("stage0", 4), ("stage1", 4), ("stage2", 4)],
}


@needs_upstream
def test_records_keep_instances_positions_variants_and_costs(imported):
    records = load_records(imported / "mem0-gpt-5.4")
    meta = load_metadata(imported / "mem0-gpt-5.4")
    for task, expected in EXPECTED_VARIANTS.items():
        assert [(v["name"], v["instances"]) for v in meta["tasks"][task]["variants"]] == expected
        doc = artifact("mem0-gpt-5.4", task)
        mine = [r for r in records if r["task"] == task]
        sl = sorted((r for r in mine if r["mode"] == "stateless"), key=lambda r: r["position"])
        assert [r["instance_id"] for r in sl] == [x["instance_id"] for x in doc["summary"]["sequence_signature"]]
        block = {r["instance_id"]: r["variant"] for r in sl}
        for rt in doc["run_traces"]:
            k = rt["run_index"]
            rows = sorted((r for r in mine if r["mode"] == "stateful" and r["rollout"] == k), key=lambda r: r["position"])
            outs = rt["trace"]["result"]["instance_outcomes"]
            assert [r["instance_id"] for r in rows] == [o["instance_id"] for o in outs]
            assert [r["position"] for r in rows] == list(range(len(outs)))
            # upstream permutes within variants: every rollout keeps each variant's block in place
            assert [r["variant"] for r in rows] == [r["variant"] for r in sl]
            assert all(block[r["instance_id"]] == r["variant"] for r in rows)
        # the manifest headline's cost is the mean stateful cost per rollout
        manifest = json.loads((UPSTREAM / "runs" / "mem0-gpt-5.4" / "manifest.json").read_text())
        head = next(t["headline"] for t in manifest["tasks"] if t["task"] == task)
        per_rollout = defaultdict(float)
        for r in mine:
            if r["mode"] == "stateful":
                per_rollout[r["rollout"]] += r["cost"]
        assert np.mean(list(per_rollout.values())) == pytest.approx(head["total_cost_usd"], abs=1e-6)


@needs_upstream
def test_cohort_signed_bits_match_upstream_rescoring_and_r_max(imported):
    for system in SYSTEMS:
        doc = artifact(system, "cohort_studies")
        records = [r for r in load_records(imported / system) if r["task"] == "cohort_studies"]
        # the artifact's own summary holds the rescored (signed-bit) outcomes: ours must agree
        rescored = {("stateless", 0, o["instance_id"]): o["reward"] for o in doc["summary"]["baseline"]["instance_outcomes"]}
        for run in doc["summary"]["runs"]:
            rescored.update({("stateful", run["run_index"], o["instance_id"]): o["reward"] for o in run["instance_outcomes"]})
        assert len(rescored) == len(records) == 120
        for r in records:
            assert r["reward"] == pytest.approx(rescored[(r["mode"], r["rollout"], r["instance_id"])], abs=1e-6)
        refs = {r["instance_id"]: r["metadata"]["mean_reference_kl"] for r in records}
        assert round(np.mean(list(refs.values())) / math.log(2), 6) == upstream.R_MAX["cohort_studies"]


@needs_upstream
def test_gain_curves_paired_by_id_match_upstream_summary_and_differ_from_position_pairing(imported):
    system = "icl-claude-sonnet-4.6"
    records = load_records(imported / system)
    result = compute(imported / system, n_boot=200)
    for t in result["tasks"]:
        doc = artifact(system, t["task"])
        by_pos = upstream.position_paired_cumulative_gain(records, t["task"], system)
        by_id = t["curves"]["cumulative_gain"]["mean"]
        assert by_id[-1] == pytest.approx(by_pos[-1])  # sums do not depend on the pairing
        if t["task"] != "cohort_studies":  # upstream's summary holds signed bits; ours too, checked above
            assert t["curves"]["gain"]["mean"] == pytest.approx(doc["summary"]["aggregate"]["mean_gain_by_index"], abs=1e-4)
        gap = max(abs(a - b) for a, b in zip(by_id, by_pos))
        permuted = doc["summary"]["run_mode"] == "permute" and any(
            [o["instance_id"] for o in rt["trace"]["result"]["instance_outcomes"]]
            != [x["instance_id"] for x in doc["summary"]["sequence_signature"]] for rt in doc["run_traces"])
        assert (gap > 1e-6) == permuted, t["task"]


@needs_upstream
def test_clbench_conventions_on_imports(imported):
    for system in SYSTEMS:
        up = {r["task"]: r for r in upstream.compute(imported / system)["tasks"]}
        for t in compute(imported / system, n_boot=200)["tasks"]:
            assert t["plasticity"]["mean"] + t["stability"]["mean"] == pytest.approx(t["normalized_gain"]["mean"])
            lo, hi = t["normalized_gain"]["ci"]
            assert lo <= t["normalized_gain"]["mean"] <= hi
            same = t["task"] != "cohort_studies"  # only cohort is rescored
            for m in ("normalized_gain", "normalized_reward"):
                assert (t[m]["mean"] == pytest.approx(up[t["task"]][m]["mean"])) == same, (system, t["task"], m)


@needs_upstream
def test_import_refuses_to_overwrite_without_force(imported, capsys):
    target = imported / "icl-gpt-5.4"
    assert main(["import-upstream", str(UPSTREAM / "runs" / "icl-gpt-5.4"), "--out", str(imported)]) == 1
    assert "--force" in capsys.readouterr().err
    before = load_records(target)
    assert main(["import-upstream", str(UPSTREAM / "runs" / "icl-gpt-5.4"), "--out", str(imported), "--force"]) == 0
    assert load_records(target) == before  # deterministic, and the lone system finds its reference


@needs_upstream
def test_html_report_of_an_import_shows_both_conventions(imported):
    run = imported / "icl-gpt-5.4"
    assert main(["report", str(run), "--format", "html", "--n-boot", "200"]) == 0
    page = (run / "report.html").read_text()
    assert "Per task (upstream conventions)" in page and "What changes under clbench" in page
    assert "46.198 ± 1.001 / 26.437 (match)" in page and "(DIFFERS)" not in page
    assert page.count('src="data:image/png;base64,') == 2 * 5 + 2  # 5 tasks with records + 2 Pareto views
    assert (run / "plots" / "cohort_studies--icl-gpt-5.4--learning-curve.png").is_file()


@needs_upstream
def test_one_aggregate_definition_in_report_and_compare(imported):
    from clbench.reporting import leaderboard

    board = leaderboard.collect(sorted(imported.iterdir()), conventions="clbench", n_boot=300)
    # icl-gpt-5.4 knows poker from its manifest headline only: no interval, so not aggregated
    assert board["left_out"] == ["exploitable_poker"] and len(board["shared_tasks"]) == 5
    for s in board["systems"]:
        own = compute(imported / s["system"], n_boot=300)
        per_task = {t["task"]: t for t in own["tasks"]}
        for m in ("normalized_reward", "normalized_gain"):
            mean = np.mean([per_task[t][m]["mean"] for t in board["shared_tasks"]])
            assert s["aggregate"][m]["mean"] == pytest.approx(mean)
            lo, hi = s["aggregate"][m]["ci"]
            assert lo < mean < hi
        if s["system"] == "icl-gpt-5.4":  # the same tasks in its own report: the same number
            assert own["aggregate"]["icl-gpt-5.4"]["normalized_reward"]["mean"] == pytest.approx(
                s["aggregate"]["normalized_reward"]["mean"])
            assert round(100 * s["aggregate"]["normalized_reward"]["mean"], 1) == 22.7


# ----------------------------------------------------------------------------- the published layout
PUBLISHED = UPSTREAM / "published-layout" / "final_results" if UPSTREAM else None
needs_published = pytest.mark.skipif(
    PUBLISHED is None or not (PUBLISHED / "runs").is_dir(),
    reason="the published layout (../shared/upstream-clbench-v1/published-layout/final_results) is absent")


def _linked_clone(tmp_path: Path) -> Path:
    """A clone-like final_results/ of symlinks to the shared files (nothing copied), plus the
    per-system task_artifacts.json.gz a real clone has, which is not a task document."""
    root = tmp_path / "final_results" / "runs"
    for system_dir in sorted((PUBLISHED / "runs").iterdir()):
        (root / system_dir.name / "tasks").mkdir(parents=True)
        (root / system_dir.name / "manifest.json").symlink_to(system_dir / "manifest.json")
        for doc in sorted((system_dir / "tasks").glob("*.json.gz")):
            (root / system_dir.name / "tasks" / doc.name).symlink_to(doc)
        with gzip.open(root / system_dir.name / "task_artifacts.json.gz", "wt") as fh:
            json.dump({"artifacts": {"not": "a task"}}, fh)
    return root.parent


@needs_published
def test_import_reads_the_published_layout_directly(tmp_path, capsys):
    """final_results/runs/<system>/tasks/*.json.gz with manifest and task_artifacts: the same records
    and task parameters as the flat copy of the same systems."""
    clone = _linked_clone(tmp_path)
    ref = str(UPSTREAM / "runs" / "icl-gpt-5.4")  # a real clone has it beside the others
    assert main(["import-upstream", str(clone), "--out", str(tmp_path / "pub"), "--reference-system", ref]) == 0
    printed = capsys.readouterr().out
    assert "claude-code-sonnet-4.6: 6 tasks, 1806 records" in printed and "task_artifacts" not in printed
    systems = sorted(p.name for p in (PUBLISHED / "runs").iterdir())
    assert main(["import-upstream", str(UPSTREAM / "runs"), "--out", str(tmp_path / "flat")]) == 0
    for system in systems:
        assert load_records(tmp_path / "pub" / system) == load_records(tmp_path / "flat" / system)
        assert load_metadata(tmp_path / "pub" / system)["tasks"] == load_metadata(tmp_path / "flat" / system)["tasks"]
    per_task, _, _ = published_from_readme()
    rows = {(r["task"], r["system"]): r for s in systems for r in upstream.compute(tmp_path / "pub" / s)["tasks"]}
    checked = [k for k in per_task if k in rows]
    assert checked  # the paper's per-task numbers of these systems, from the published layout
    for key in checked:
        assert round(rows[key]["cumulative_reward"]["mean"], 3) == per_task[key][0]
    # one system's folder of the published layout imports on its own too
    one = clone / "runs" / systems[0]
    assert upstream.system_dirs(one) == {systems[0]: one}
    assert sorted(upstream.artifacts.task_files(one)) == sorted(p.name[:-8] for p in (one / "tasks").glob("*.json.gz"))


@needs_published
@pytest.mark.parametrize("damage, says", [
    (lambda p: p.write_bytes(b"not gzip at all"), "not a readable gzip JSON task document"),
    (lambda p: p.write_bytes(gzip.compress(b"[1, 2]")), "not a task document (a JSON list"),
    (lambda p: p.write_bytes(gzip.compress(b'{"summary": {}}')), "missing field 'baseline_trace'"),
    (lambda p: p.write_bytes(gzip.compress(b'{"baseline_trace": {"result": {"instance_outcomes": 3}}}')),
     "not an upstream task document"),
])
def test_an_unreadable_file_is_a_one_line_error_naming_it(tmp_path, capsys, damage, says):
    clone = _linked_clone(tmp_path)
    bad = clone / "runs" / "mem0-gpt-5.4" / "tasks" / "sales_prediction.json.gz"
    bad.unlink()
    damage(bad)
    ref = str(UPSTREAM / "runs" / "icl-gpt-5.4")
    assert main(["import-upstream", str(clone), "--out", str(tmp_path / "out"), "--reference-system", ref]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and says in err, err
    assert not (tmp_path / "out" / "mem0-gpt-5.4").exists()


@needs_published
def test_a_broken_manifest_is_named_too(tmp_path, capsys):
    clone = _linked_clone(tmp_path)
    manifest = clone / "runs" / "mem0-gpt-5.4" / "manifest.json"
    manifest.unlink()
    manifest.write_text("{oops")
    assert main(["import-upstream", str(clone), "--out", str(tmp_path / "out"),
                 "--reference-system", str(UPSTREAM / "runs" / "icl-gpt-5.4")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(manifest) in err and "manifest" in err
