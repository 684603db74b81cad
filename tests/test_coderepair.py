"""CodeRepair-v6 on the real tablib 3.5.0 / tenacity 7.0.0 / tenacity 8.2.3 sdists, in real sandboxes.

Task data (diffs, hidden tests, issue texts), the sdists' hashes, reward semantics, what is
evaluated, ground truth out of reach, the scripted agents and the injected-bug check
(FAIL_TO_PASS fail with the bug and pass with the reference fix, PASS_TO_PASS pass in both),
attacks on the grading (each must score 0, named as tampering where the grader detects it) and
the checkout's file metadata, and the drift (tenacity 7.0.0 ships its tests inside the package,
8.2.3 in tests/). The default run uses bubblewrap and checks one bug per release;
the full 26-bug checks are `slow` (tests/conftest.py: opt in with `-m slow` or CLBENCH_SLOW=1);
the Docker variants are marked `docker` and skip with the reason when no engine answers or the
images are not built (`clbench containers build --offline-base`). The env contract (check_env, reset modes, determinism, info keys, spec card, r_max on a sample and, slow,
on every issue, r_reference, slow) is checked for every env in tests/test_contract.py.

The sdists and test venvs live in the user's clbench cache (built once, e.g. by
`clbench containers build`), not in the per-session cache of conftest.py.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import gymnasium as gym
import platformdirs
import pytest

import clbench  # noqa: F401
from clbench.agent import make_agent
from clbench.agents.coderepair import issue_names
from clbench.env import load_task_spec
from clbench.envs.coderepair.checkout import agent_checkout, buggy_tree
from clbench.envs.coderepair.issues import load_issue
from clbench.envs.coderepair.patching import apply_diff, parse_diff, touched_files
from clbench.envs.coderepair.sources import SourceError, pristine_tree, sha256_of, verify_sdist
from clbench.runner import play_instance
from clbench.sandbox.bwrap import bwrap_works
from clbench.sandbox.select import docker_ready

ENV = "clbench/CodeRepair-v6"
SPEC = load_task_spec("coderepair")
ISSUES = [i for block in SPEC["schedules"]["default"] for i in block["issues"]]
#: the user's real cache, captured before conftest.py redirects XDG_CACHE_HOME for each test
REAL_CACHE = os.environ.get("CLBENCH_CACHE_DIR") or platformdirs.user_cache_dir("clbench")
SAMPLE = ["tablib-05", "tenacity-11", "tenacity-03"]  # one per release
#: the default run checks per-issue sandbox work on one issue, the others with CLBENCH_SLOW=1 (each
#: costs seconds of sandboxes per backend and mode; the grader's code path is the same for all)
SAMPLE_PARAMS = [pytest.param(i, marks=() if i == "tenacity-11" else pytest.mark.slow) for i in SAMPLE]


@pytest.fixture(autouse=True)
def _shared_cache(monkeypatch):
    monkeypatch.setenv("CLBENCH_CACHE_DIR", REAL_CACHE)


def backend_or_skip(backend: str) -> str:
    if backend == "docker":
        images = [repo["image"] for repo in load_task_spec("coderepair")["repos"].values()]
        from clbench.sandbox import Runtime

        for image in images:
            ok, why = docker_ready(Runtime(image=image, build_hint="clbench containers build --offline-base"))
            if not ok:
                pytest.skip(f"docker: {why}")
    elif not bwrap_works()[0]:
        pytest.skip(f"bwrap: {bwrap_works()[1]}")
    return backend


def _module_env(backend: str):
    """One env per test module and backend (building the checkouts is slow)."""
    backend_or_skip(backend)
    os.environ["CLBENCH_CACHE_DIR"] = REAL_CACHE
    e = gym.make(ENV, backend=backend).unwrapped
    yield e
    e.close()


@pytest.fixture(scope="module")
def env():
    yield from _module_env("bwrap")


def house_names() -> tuple:
    from clbench.envs.coderepair import house

    return house.NAMES


def scored(met: int, steps: int) -> float:
    """v4's reward of a resolved issue: (0.5 + 0.5 x met/5) x (1 - (steps - 1)/80)."""
    return (0.5 + 0.5 * met / 5) * (1 - (steps - 1) / 80)


def play(env, agent, instance: str, stateless: bool = True, traj: list | None = None) -> dict:
    obs, info = env.reset(seed=0, options={"instance": instance, "stateless": stateless})
    out = play_instance(env, agent, obs, info, [] if traj is None else traj)
    assert out["error"] is None, out["error"]
    return out


def replay(agent, traj: list[dict]) -> None:
    """Feed `agent` a played instance's observations (play_instance's trajectory) without a sandbox,
    asserting it takes the recorded action at every step: the env is deterministic, so it would have
    seen exactly these observations had it played."""
    reset = traj[0]
    info = {"instance_id": reset["instance_id"], "position": reset["position"]}
    agent.begin_instance(reset["observation"], info)
    obs = reset["observation"]
    steps = [t for t in traj if t["event"] == "step"]
    for step in steps:
        assert agent.act(obs, info) == step["action"], step["step"]
        obs = step["observation"]
    agent.end_instance(steps[-1]["reward"], info, obs)


# ---------------------------------------------------------------------------------- task data
def test_schedule_is_tablib_then_two_tenacity_releases():
    blocks = SPEC["schedules"]["default"]
    assert [(b["variant"], len(b["issues"])) for b in blocks] == [
        ("tablib-3.5.0", 9), ("tenacity-7.0.0", 4), ("tenacity-8.2.3", 13)]
    for block in blocks:  # a variant is named by its release: project-version
        for issue_id in block["issues"]:
            repo = SPEC["repos"][load_issue(issue_id).repo]
            assert block["variant"] == f"{repo['pypi']}-{repo['version']}", (block["variant"], issue_id)
    assert SPEC["drifts"]["default"][0]["variant"] == "tenacity-8.2.3"
    short = SPEC["schedules"]["short"]
    assert [b["variant"] for b in short] == [b["variant"] for b in blocks] and SPEC["drifts"]["short"]


def test_sdists_match_their_pinned_hashes(tmp_path):
    for name, repo in SPEC["repos"].items():
        tree = pristine_tree(repo["pypi"], repo["version"], repo["sdist_sha256"])
        sdist = Path(REAL_CACHE) / "coderepair" / "sdists" / f"{repo['pypi']}-{repo['version']}.tar.gz"
        assert sha256_of(sdist) == repo["sdist_sha256"]
        assert (tree / repo["source_root"]).is_dir() and (tree / repo["tests_root"]).is_dir()
    # the drift: tenacity 7.0.0 packages its tests, 8.x keeps them in a top-level folder
    old, new = (pristine_tree(r["pypi"], r["version"], r["sdist_sha256"])
                for r in (SPEC["repos"]["tenacity7"], SPEC["repos"]["tenacity"]))
    assert (old / "tenacity/tests/test_tenacity.py").is_file() and not (old / "tests").exists()
    assert (new / "tests/test_tenacity.py").is_file() and not (new / "tenacity/tests").exists()
    forged = tmp_path / "forged.tar.gz"
    forged.write_bytes(sdist.read_bytes() + b"\0")
    with pytest.raises(SourceError, match="does not match"):
        verify_sdist(forged, SPEC["repos"]["tenacity"]["sdist_sha256"])


@pytest.mark.parametrize("issue_id", ISSUES)
def test_issue_data_is_consistent(issue_id, tmp_path):
    issue = load_issue(issue_id)
    repo = SPEC["repos"][issue.repo]
    pristine = pristine_tree(repo["pypi"], repo["version"], repo["sdist_sha256"])
    files = touched_files(issue.bug_diff)
    assert files == touched_files(issue.fix_diff) and all(f.startswith(repo["source_root"] + "/") for f in files)
    assert not any(f.startswith(repo["tests_root"] + "/") for f in files)
    assert all(i.startswith(repo["tests_root"] + "/") for i in issue.fail_to_pass + issue.pass_to_pass)
    # the bug applies to the real source and the reference fix restores it exactly
    tree = buggy_tree(pristine, issue.bug_diff, tmp_path / "tree")
    assert all((tree / f).read_text() != (pristine / f).read_text() for f in files)
    apply_diff(tree, issue.fix_diff)
    assert all((tree / f).read_text() == (pristine / f).read_text() for f in files)
    # hidden tests are cut from the agent's checkout, every other test stays
    checkout = agent_checkout(pristine, issue.bug_diff, list(issue.fail_to_pass), tmp_path / "checkout")
    for node in issue.fail_to_pass:
        path, name = node.split("::")[0], node.split("::")[-1]
        if issue.hidden_module and path == issue.hidden_module[0]:  # the issue's own module: grading trees only
            assert not (checkout / path).exists() and not (pristine / path).exists()
            assert f"def {name}(" in issue.hidden_module[1]
            continue
        assert f"def {name}(" not in (checkout / path).read_text() and f"def {name}(" in (pristine / path).read_text()
    for node in issue.pass_to_pass:
        assert f"def {node.split('::')[-1]}(" in (checkout / node.split("::")[0]).read_text()
    assert not set(issue.fail_to_pass) & set(issue.pass_to_pass) and issue.fail_to_pass
    # the report describes symptoms, never the fix: no line the fix adds appears in it
    added = [h for fp in parse_diff(issue.fix_diff) for hunk in fp.hunks
             for h in hunk.new if h not in hunk.old and len(h.strip()) > 12]
    assert not any(line.strip() in issue.text for line in added)
    assert "```python" in issue.text and issue_names(issue.text)


def test_same_repository_issues_touch_overlapping_modules():
    for project in ("tablib", "tenacity"):  # both tenacity releases together
        touched = [f for i in ISSUES if SPEC["repos"][load_issue(i).repo]["pypi"] == project
                   for f in touched_files(load_issue(i).fix_diff)]
        most = max(touched.count(f) for f in set(touched))
        assert most >= 3, (repo, touched)


# ---------------------------------------------------------------------------------- injected bugs
def check_bug(issue_id: str, backend: str) -> None:
    """On the records (grading.py): FAIL_TO_PASS fail with the bug and pass with the fix, PASS_TO_PASS
    pass with the fix; the bug changes, in some hidden test, a record that guessing "every check holds"
    cannot produce (an operand compared with a dropped literal, an exception type; the threat model's
    residual-risk claim)."""
    from clbench.envs.coderepair.evaluation import expected_records, record_tree
    from clbench.envs.coderepair.grading import UNGUESSABLE, bounds_of_tests, differences, judge
    from clbench.envs.coderepair.runtime import runtime_for, runtime_key
    from clbench.sandbox import Limits, open_sandbox

    issue = load_issue(issue_id)
    repo = SPEC["repos"][issue.repo]
    pristine = pristine_tree(repo["pypi"], repo["version"], repo["sdist_sha256"])
    runtime = runtime_for(issue.repo, repo, SPEC["workdir"], backend)
    ids = list(issue.fail_to_pass) + list(issue.pass_to_pass)

    def make(t):
        return open_sandbox(t, backend=backend, runtime=runtime, workdir=SPEC["workdir"],
                            limits=Limits(timeout=300, memory_mb=3072))

    expected = expected_records(issue, pristine, make, 300, SPEC["workdir"], repo, runtime_key(backend, runtime))
    with tempfile.TemporaryDirectory() as tmp:
        for label, fixed in (("bug", False), ("fix", True)):
            tree = buggy_tree(pristine, issue.bug_diff, Path(tmp) / label)
            if fixed:
                apply_diff(tree, issue.fix_diff)
            issue.with_hidden_module(tree)
            bounds = bounds_of_tests(tree, ids)
            actual = record_tree(tree, ids, list(issue.fail_to_pass), make, 300, SPEC["workdir"], repo)
            outcome = judge(expected, actual, ids, bounds)
            for node in issue.fail_to_pass:
                assert outcome[node] == ("PASSED" if fixed else "FAILED"), (issue_id, label, node, outcome[node])
            if fixed:
                bad = {n: outcome[n] for n in issue.pass_to_pass if outcome[n] != "PASSED"}
                assert not bad, (issue_id, label, bad)
            else:
                changed = [k for node in issue.fail_to_pass for k in differences(expected, actual, node, bounds)
                           if int(k.split(".")[0]) not in bounds[node.split("::")[0]]]  # a bound's outcome is a guess
                assert any(UNGUESSABLE.match(k) for k in changed), (issue_id, changed[:10])


def test_every_graded_test_starts_on_the_checkout_clock(tmp_path):
    """The fixed tree's records are cached on one day and a submission is graded on another: a value
    made from today's date (tablib's DBF header, a default timestamp) must read the same in both, so
    the grader starts each test, and the imports before them, on the checkout's wall clock. Durations
    keep the real clock (monotonic)."""
    import datetime
    import json
    import shutil

    from clbench.envs.coderepair.checkout import CHECKOUT_TIME
    from clbench.envs.coderepair.evaluation import record_tree
    from clbench.envs.coderepair.runtime import runtime_for
    from clbench.sandbox import Limits, open_sandbox

    backend = backend_or_skip("bwrap")
    repo = SPEC["repos"]["tenacity"]
    tree = Path(shutil.copytree(pristine_tree(repo["pypi"], repo["version"], repo["sdist_sha256"]), tmp_path / "tree"))
    (tree / "tests" / "test_clock.py").write_text(
        "import datetime, time\n"
        "AT_IMPORT = datetime.date.today()\n\n"
        "def test_today():\n"
        "    assert (AT_IMPORT, datetime.date.today(), int(time.time()) // 60) == (None, None, None)\n\n"
        "def test_sleep_takes_real_time():\n"
        "    t0 = time.monotonic(); w0 = time.time(); time.sleep(0.2)\n"
        "    assert (time.monotonic() - t0 >= 0.2, 0.15 < time.time() - w0 < 5) == (False, False)\n")
    ids = ["tests/test_clock.py::test_today", "tests/test_clock.py::test_sleep_takes_real_time"]
    runtime = runtime_for("tenacity", repo, SPEC["workdir"], backend)

    def make(t):
        return open_sandbox(t, backend=backend, runtime=runtime, workdir=SPEC["workdir"], limits=Limits(timeout=120))

    records = record_tree(tree, ids, [], make, 120, SPEC["workdir"], repo, rename=False)
    assert {i: records[i][""]["status"] for i in ids} == dict.fromkeys(ids, "ok"), records
    date = ["obj", "datetime.date", "datetime.date(2023, 6, 1)"]
    assert date[2] == repr(datetime.datetime.fromtimestamp(CHECKOUT_TIME, datetime.timezone.utc).date())
    (today,) = [json.loads(v) for v in records[ids[0]][""]["records"].values()]
    assert today[1] == [date, date, CHECKOUT_TIME // 60], today  # at import and in the test
    (slept,) = [json.loads(v) for v in records[ids[1]][""]["records"].values()]
    assert slept[1] == [True, True], slept  # both clocks tick


@pytest.mark.parametrize("issue_id", SAMPLE_PARAMS)
def test_injected_bug_check_bwrap_sample(issue_id):
    check_bug(issue_id, backend_or_skip("bwrap"))


@pytest.mark.slow
@pytest.mark.parametrize("issue_id", ISSUES)
def test_injected_bug_check_bwrap_all(issue_id):
    check_bug(issue_id, backend_or_skip("bwrap"))


@pytest.mark.docker
@pytest.mark.parametrize("issue_id", SAMPLE_PARAMS)
def test_injected_bug_check_docker_sample(issue_id):
    check_bug(issue_id, backend_or_skip("docker"))


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("issue_id", ISSUES)
def test_injected_bug_check_docker_all(issue_id):
    check_bug(issue_id, backend_or_skip("docker"))


# ---------------------------------------------------------------------------------- the env
def test_first_observation_and_workspace(env):
    obs, info = env.reset(seed=0)
    assert info["instance_id"] == "tablib-01" and info["steps_left"] == 40
    assert "Repository: jazzband/tablib" in obs and "blank lines" in obs and "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in obs
    obs, reward, term, trunc, info = env.step("git log --oneline | wc -l; ls src/tablib/formats | head -3; pwd")
    assert (reward, term, trunc) == (0.0, False, False)
    assert "<returncode>0</returncode>" in obs and "\n1\n__init__.py\n_cli.py\n_csv.py\n/testbed\n" in obs
    obs, *_ = env.step('{"tool": "bash", "arguments": {"command": "echo via-json"}}')
    assert "via-json" in obs and "(steps left: 38)" in obs


def test_hidden_tests_and_task_data_are_unreachable(env):
    env.reset(seed=0, options={"instance": "tablib-05", "stateless": True})
    hidden = load_issue("tablib-05").fail_to_pass[0].split("::")[-1]
    obs, *_ = env.step(f"grep -rn {hidden} /testbed /tmp /opt /etc 2>/dev/null | wc -l; "
                       "grep -rl 'fail_to_pass\\|CLBENCH_PATCH' / --include=*.yaml --include=*.diff 2>/dev/null | head; "
                       "git -C /testbed log --all --format=%H | wc -l; echo end")
    assert "\n0\n1\nend\n" in obs, obs


def test_submit_without_a_fix_scores_zero(env):
    env.reset(seed=0, options={"instance": "tenacity-03", "stateless": True})
    obs, reward, term, trunc, info = env.step("submit")
    assert term and reward == 0.0 and info["solved"] is False
    assert info["raw_metric"] == {"name": "issue_regret", "value": 40.0}
    assert "issue tests 0/1 pass" in obs


def test_only_source_changes_count(env):
    """A conftest that skips every test, or edited tests, cannot make a wrong fix pass."""
    env.reset(seed=0, options={"instance": "tenacity-03", "stateless": True})
    env.step("printf 'import pytest\\n\\n@pytest.fixture(autouse=True)\\ndef _s():\\n    pytest.skip()\\n'"
             " > conftest.py && cp conftest.py tests/conftest.py")
    obs, reward, term, _, info = env.step(f"echo {SPEC['submit_marker']}")
    assert term and reward == 0.0
    details = info["details"]
    assert set(details["ignored_files"]) == {"conftest.py", "tests/conftest.py"} and details["changed_files"] == []


# ---------------------------------------------------------------------------------- grading no sandbox code decides
def submit_attack(env, issue_id: str, command: str) -> tuple[str, float, dict]:
    env.reset(seed=0, options={"instance": issue_id, "stateless": True})
    obs, reward, term, _, info = env.step(command)
    if not term:
        more, reward, term, _, info = env.step(f"echo {SPEC['submit_marker']}")
        obs += more
    assert term
    return obs, reward, info


def play_redteam(env, issue_id: str, cls: str, **params) -> tuple[str, float, dict]:
    """One red-team policy (agents/coderepair_redteam.py) on one issue: its one command, submitted."""
    from clbench.agents import coderepair_redteam

    obs, info = env.reset(seed=0, options={"instance": issue_id, "stateless": True})
    agent = getattr(coderepair_redteam, cls)(env.agent_card if hasattr(env, "agent_card") else env.spec_card,
                                             seed=0, **params)
    obs, reward, term, _, info = env.step(agent.act(obs, info))
    assert term, obs
    return obs, reward, info


FORGERIES = ["patch", "forge-file", "exit", "fake-verdict"]


def check_forgery(env, issue_id: str, mode: str) -> None:
    """Every attack on the test run from the package's __init__.py scores 0; no issue test passes."""
    obs, reward, info = play_redteam(env, issue_id, "GradingForgery", mode=mode)
    assert "appended" in obs and info["details"]["changed_files"], obs
    assert reward == 0.0 and not info["solved"] and "issue tests 0/" in obs, obs[-3000:]


def check_restore(env, issue_id: str, source: str) -> None:
    """Restoring the package from a copy found in the sandbox finds none, and scores 0."""
    obs, reward, info = play_redteam(env, issue_id, "VendoredRestore", source=source)
    assert "no copy found" in obs and reward == 0.0 and not info["solved"], obs[-3000:]


#: a record file that is not the runner's: written over it at exit by code in the package
GARBLE = """
import atexit as _a, glob as _g, os as _o
_dirs = _g.glob(_o.path.join(_o.getcwd(), ".grade-*"))
def _garble():
    for _d in _dirs:
        open(_o.path.join(_d, "recording.json"), "w").write("[not the runner's]")
_a.register(_garble)
"""


def check_tampering_verdict(env, issue_id: str) -> None:
    """A tampered record file scores 0 and the verdict says "tampering", nothing about what was caught."""
    init = f"{SPEC['repos'][load_issue(issue_id).repo]['source_root']}/__init__.py"
    obs, reward, info = submit_attack(env, issue_id, f"cat >> {init} <<'EOF'\n{GARBLE}EOF\necho {SPEC['submit_marker']}")
    assert reward == 0.0 and info["tampering"] is True, obs
    assert "not resolved: tampering." in obs and "recording" not in obs and "record file" not in obs, obs
    assert info["details"]["evaluation"] == "not resolved: tampering"


@pytest.mark.parametrize("issue_id", SAMPLE_PARAMS)
@pytest.mark.parametrize("mode", FORGERIES)
def test_grading_forgeries_score_zero_bwrap(env, issue_id, mode):
    check_forgery(env, issue_id, mode)


@pytest.mark.parametrize("source", ["vendored-dir", "wheel"])
def test_vendored_copy_restore_scores_zero_bwrap(env, source):
    check_restore(env, "tenacity-03", source)


def test_tampering_verdict_says_only_tampering_bwrap(env):
    check_tampering_verdict(env, "tenacity-03")


def check_outside_attack(env, issue_id: str) -> None:
    """conftest.py, sitecustomize/usercustomize/.pth, edited tests, a python shim on PATH and writes
    into the test runtime: none reach the grading."""
    repo = load_issue(issue_id).repo
    force = ("import pytest\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport(item, call):\\n"
             "    outcome = yield\\n    outcome.get_result().outcome = 'passed'\\n")
    command = (f"printf '{force}' > conftest.py && cp conftest.py tests/conftest.py && "
               f"cp conftest.py {SPEC['repos'][repo]['source_root']}/conftest.py && "
               "printf 'import os; os._exit(0)\\n' | tee sitecustomize.py usercustomize.py > /dev/null && "
               "printf 'import os; os._exit(0)\\n' > clbench-evil.pth && "
               "for f in tests/test_*.py; do sed -i 's/^\\( *\\)def test\\(.*\\):$/\\1def test\\2:\\n\\1    return/' $f; done; "
               "mkdir -p bin && printf '#!/bin/sh\\nexit 0\\n' > bin/python && chmod +x bin/python && "
               "cp bin/python /opt/venv/bin/python 2>&1; "
               "echo 'import os; os._exit(0)' > $(python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')"
               "/evil.pth 2>&1; echo done")
    obs, reward, info = submit_attack(env, issue_id, command)
    assert "done" in obs and obs.count("Read-only file system") + obs.count("Permission denied") >= 2, obs
    assert reward == 0.0 and not info["solved"] and "issue tests 0/" in obs, obs
    assert {"conftest.py", "tests/conftest.py", "sitecustomize.py", "bin/python"} <= set(info["details"]["ignored_files"])


def test_changes_outside_the_package_do_not_reach_grading_bwrap(env):
    check_outside_attack(env, "tablib-05")


@pytest.fixture(scope="module")
def docker_env():
    yield from _module_env("docker")


@pytest.mark.docker
@pytest.mark.parametrize("issue_id", SAMPLE_PARAMS)
@pytest.mark.parametrize("mode", FORGERIES)
def test_grading_forgeries_score_zero_docker(docker_env, issue_id, mode):
    check_forgery(docker_env, issue_id, mode)


@pytest.mark.docker
@pytest.mark.parametrize("source", ["vendored-dir", "wheel"])
def test_vendored_copy_restore_scores_zero_docker(docker_env, source):
    check_restore(docker_env, "tenacity-03", source)


@pytest.mark.docker
def test_tampering_verdict_says_only_tampering_docker(docker_env):
    check_tampering_verdict(docker_env, "tenacity-03")


@pytest.mark.docker
def test_changes_outside_the_package_do_not_reach_grading_docker(docker_env):
    check_outside_attack(docker_env, "tablib-05")


def test_rewritten_tests_hold_no_expected_literal_and_hidden_names_are_fresh(tmp_path):
    """Each grading: new hidden-test names and folder; the rewritten modules have no check left that
    could decide (no assert, no unittest assert method, no pytest.raises) and no literal operand of
    a comparison (the expected values the sandbox must not see), and the hidden test sits where its
    id says."""
    import ast

    from clbench.envs.coderepair.grading import plan_grading
    from clbench.envs.coderepair.instrument import REC

    issue = load_issue("tenacity-01")
    repo = SPEC["repos"][issue.repo]
    pristine = pristine_tree(repo["pypi"], repo["version"], repo["sdist_sha256"])
    rel = issue.fail_to_pass[0].split("::")[0]
    original = (buggy_tree(pristine, issue.bug_diff, tmp_path / "orig") / rel).read_text()
    assert "self.assertEqual" in original and ", 20)" in original  # the hidden tests' expected literals
    plans = []
    for k in range(12):
        tree = buggy_tree(pristine, issue.bug_diff, tmp_path / str(k))
        plan = plan_grading(tree, list(issue.fail_to_pass), list(issue.pass_to_pass))
        plans.append(plan)
        assert set(plan.hidden) == set(issue.fail_to_pass) and set(plan.hidden.values()) <= set(plan.run_ids)
        text = (tree / rel).read_text()
        module = ast.parse(text)
        assert not any(isinstance(n, ast.Assert) for n in ast.walk(module))
        assert "self.assert" not in text and "pytest.raises" not in text
        for call in ast.walk(module):
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and isinstance(call.func.value, ast.Name) and call.func.value.id == REC
                    and call.func.attr == "compare"):
                assert not any(isinstance(a, ast.Constant) for a in call.args[2:]), ast.unparse(call)
        classes = {n.name: n for n in module.body if isinstance(n, ast.ClassDef)}
        for old, new in plan.hidden.items():
            cls, name = new.split("::")[1:]
            assert any(isinstance(f, ast.FunctionDef) and f.name == name for f in classes[cls].body), (new, k)
            assert old.split("::")[-1] not in text
    assert len({p.folder for p in plans}) == 12 and len({tuple(sorted(p.hidden.values())) for p in plans}) == 12


def test_a_measurement_under_a_literal_bound_is_stable_by_its_outcome():
    """Two runs of the fixed tree rarely measure the same elapsed time (tenacity's `assertLess(t, 1.1)`
    gave 0 and 1 ms): such an operand is kept by the bound's outcome, as the judge compares it, so a
    bug that sleeps a second (t = 1002) still fails; an unbounded value that differs is dropped."""
    from clbench.envs.coderepair.bounds import bounds
    from clbench.envs.coderepair.grading import judge, stable_records

    source = ("class T:\n    def test_t(self):\n        t = elapsed()\n        self.assertLess(t, 1.1)\n"
              "        assert now() == 3\n")
    file_bounds = bounds(source)
    (site,) = file_bounds
    node = "tests/test_x.py::T::test_t"

    def run(t, now):
        return {node: {"": {"status": "ok", "records": {f"{site}.l0#1": str(t), f"{site + 1}.l0#1": str(now)}}}}

    stable = stable_records(run(0, 5), run(1, 6), bounds={"tests/test_x.py": file_bounds})
    assert stable[node][""]["stable"] == {f"{site}.l0#1": "0"}, stable
    assert judge(stable, run(1, 7), [node], {"tests/test_x.py": file_bounds}) == {node: "PASSED"}
    assert judge(stable, run(1002, 5), [node], {"tests/test_x.py": file_bounds}) == {node: "FAILED"}
    assert stable_records(run(0, 5), run(1, 6))[node][""]["stable"] == {}  # without the bounds: dropped


def test_a_tampered_or_linked_record_file_is_tampering(tmp_path):
    """The record file is untrusted: a link, a folder swapped for a link, or a shape the runner does
    not write is Tampering; a missing file is no records (every test MISSING)."""
    import json

    from clbench.envs.coderepair.grading import GradingPlan, Tampering, judge, read_recording

    plan = GradingPlan(".grade-x", ["a.py::t"], {})
    ws = tmp_path / "ws"
    (ws / plan.folder).mkdir(parents=True)
    assert read_recording(ws, plan) == {}
    assert judge({"a.py::t": {"": {"status": "ok", "stable": {}, "known": []}}}, {}, ["a.py::t"]) == {"a.py::t": "MISSING"}
    rec = ws / plan.folder / "recording.json"
    for bad in ('[1]', '{"tests": {"a.py::t": {"status": 1, "records": []}}}', "not json"):
        rec.write_text(bad)
        with pytest.raises(Tampering):
            read_recording(ws, plan)
    rec.unlink()
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"tests": {}}))
    rec.symlink_to(secret)
    with pytest.raises(Tampering):
        read_recording(ws, plan)
    rec.unlink()
    (ws / plan.folder).rmdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "recording.json").write_text(json.dumps({"tests": {}}))
    (ws / plan.folder).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(Tampering):
        read_recording(ws, plan)


# ---------------------------------------------------------------------------------- nothing singles out the bug
#: every entry's dates and mode, lstat-ed before its folder is listed (listing dates a folder);
#: -I keeps the checkout off the front of sys.path, where imports would list (and date) it
STAT_PROBE = """python3 -I - <<'EOF'
import hashlib, json, os
seen = {"mtime": set(), "atime": set(), "file": set(), "dir": set()}
order, stack, count = [], ["."], 0
while stack:
    folder = stack.pop()
    with os.scandir(folder) as it:
        entries = list(it)
    if not folder.startswith("./.git"):  # git's object folders are named after the content
        order.append([folder, [e.name for e in entries]])
    count += len(entries)
    for e in entries:
        st = e.stat(follow_symlinks=False)
        is_dir = e.is_dir(follow_symlinks=False)
        seen["mtime"].add(st.st_mtime_ns)
        seen["atime"].add(st.st_atime_ns)
        seen["dir" if is_dir else "file"].add(oct(st.st_mode & 0o7777))
        if is_dir:
            stack.append(e.path)
print(json.dumps({**{k: sorted(v) for k, v in seen.items()}, "entries": count,
                  "order": hashlib.sha256(json.dumps(order).encode()).hexdigest()}))
EOF"""


def check_checkout_looks_alike(env) -> None:
    """All files of a fresh checkout share one modification date, one access date (even after reads),
    one mode; listing order does not depend on the bug."""
    import json

    from clbench.envs.coderepair.checkout import CHECKOUT_TIME

    seen = {}
    for issue_id in ("tablib-01", "tablib-06", "tenacity-11", "tenacity-12", "tenacity-03", "tenacity-10"):
        env.reset(seed=0, options={"instance": issue_id, "stateless": True})
        env.step("cat $(git ls-files) > /dev/null; ls -laR > /dev/null; grep -rq zzz . ; true")  # reads only
        obs, *_ = env.step(STAT_PROBE)
        stats = json.loads(re.search(r"^\{.*\}$", obs, re.MULTILINE).group(0))
        assert stats["entries"] > 50, stats
        assert stats["mtime"] == [CHECKOUT_TIME * 10**9] and len(stats["atime"]) == 1, (issue_id, stats)
        assert (stats["file"], stats["dir"]) == (["0o644"], ["0o755"]), (issue_id, stats)
        seen.setdefault(load_issue(issue_id).repo, set()).add(stats["order"])
    assert all(len(orders) == 1 for orders in seen.values()), seen  # other bug files, same listing order


def test_checkout_files_look_alike_bwrap(env):
    check_checkout_looks_alike(env)


@pytest.mark.docker
def test_checkout_files_look_alike_docker(docker_env):
    check_checkout_looks_alike(docker_env)


def test_oracle_scores_one_in_one_step(env):
    # tenacity 7.0.0's issue (SAMPLE's third): test_tenacity_7_tests_inside_the_package_are_not_graded
    for issue_id in ("tablib-05", "tenacity-03"):
        agent = make_agent("oracle", env)
        out = play(env, agent, issue_id)
        assert out["reward"] == 1.0 and out["steps"] == 1


def test_invalid_actions_and_budget(env):
    env.reset(seed=0, options={"instance": "tenacity-01", "stateless": True})
    obs, reward, term, trunc, info = env.step("   ")
    assert "Invalid action: empty command" in obs and info["step"] == 1 and not term
    obs, *_ = env.step('{"tool": "bash", "arguments": {"cmd": "ls"}}')
    assert "Invalid action" in obs and "cmd" in obs  # names the argument it does not know
    obs, *_ = env.step('{"tool": "rm_rf", "arguments": {}}')
    assert "unknown tool" in obs
    env.reset(seed=0, options={"instance": "tenacity-01", "stateless": True})
    for k in range(40):
        obs, reward, term, trunc, info = env.step("true")
        if trunc:
            break
    assert (k, reward, term, trunc) == (39, 0.0, False, True) and "Step budget of 40" in obs


def test_listings_dates_and_history_are_the_same_after_every_reset(env):
    """Beyond test_contract's determinism (the reference's actions): file listings, commit dates
    and the committer are fixed, not taken from the clock or the host."""
    commands = ["ls -la src/tablib | awk '{print $1, $NF}'", "git log --format='%an %ad %s'", "id -un"]
    seen = []
    for _ in range(2):
        env.reset(seed=3)
        seen.append([env.step(c)[0] for c in commands])
    assert seen[0] == seen[1] and "clbench" in seen[0][1]


# ---------------------------------------------------------------------------------- agents
def test_reference_checks_follow_the_reports():
    """The honest reference's check scripts compile, and state the report's expectations."""
    from clbench.agents.coderepair import check_script

    for issue_id in ISSUES:
        compile(check_script(load_issue(issue_id).text), issue_id, "exec")
    assert "_expect(data.headers, \"['id', 'name']\")" in check_script(load_issue("tablib-05").text)
    assert "_outcome(exc, 'RetryError')" in check_script(load_issue("tenacity-10").text)


def test_the_reference_search_bounds_a_check_by_cpu_time_not_by_the_machines_load():
    """The search sent into the sandbox cuts an edit whose check loops at CHECK_CPU CPU seconds and lets
    one that only waits run to CHECK_TIMEOUT: a busy machine (slow start, no extra CPU) keeps the edits
    an idle one keeps, where a 4 s wall limit dropped a correct edit at load ~10."""
    import importlib.util
    import sys
    import time

    import clbench.agents.coderepair as reference

    spec = importlib.util.spec_from_file_location("search_script", Path(reference.__file__).with_name("coderepair_search.py"))
    search = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(search)
    assert search.CHECK_CPU < search.CHECK_TIMEOUT < search.WALL_CAP < 60
    t0 = time.monotonic()
    assert not search.passes(f"{sys.executable} -c 'while True: pass'", 30, cpu=1)  # SIGXCPU after 1 CPU s
    assert time.monotonic() - t0 < 20
    assert search.passes(f"{sys.executable} -c 'import time; time.sleep(1.5)'", 30, cpu=1)  # waiting is not CPU
    assert not search.passes(f"{sys.executable} -c 'import time; time.sleep(5)'", 1, cpu=1)  # the wall limit


_FORK_PROBE = """
import json, os, subprocess, sys, time
src = open(sys.argv[1]).read().split("if __name__")[0]
__file__ = sys.argv[1]  # the script's probe runs the script itself
exec(compile(src, "search", "exec"))
root, check = sys.argv[2], sys.argv[3]
out = {"preloaded": preload(check), "asyncio": "asyncio" in sys.modules, "pkg": "pkg.mod" in sys.modules}
out["passes_before_fix"] = forked_exit_code(check, 15, 4)
with open(os.path.join(root, "pkg", "mod.py"), "a") as fh:  # the child must import the edited file from disk
    fh.write("\\ndef limit(n):\\n    return n <= 3\\n")
out["passes_after_fix"] = forked_exit_code(check, 15, 4)
codes = {}
for name, body in {"exit3": "import sys; sys.exit(3)", "raises": "raise ValueError('x')", "loops": "while True: pass",
                   "hangs": "import subprocess, time; p = subprocess.Popen(['sleep', '30']); "
                            "open(sys.argv[0] + '.pid', 'w').write(str(p.pid)); time.sleep(30)"}.items():
    path = os.path.join(root, name + ".py")
    open(path, "w").write("import sys\\n" + body + "\\n")
    t = time.monotonic()
    codes[name] = [forked_exit_code(path, 20 if name == "loops" else 2, 1), round(time.monotonic() - t, 1)]
time.sleep(0.2)
grandchild = int(open(os.path.join(root, "hangs.py.pid")).read())
out["grandchild_alive"] = os.path.exists(f"/proc/{grandchild}") and "Z" not in open(f"/proc/{grandchild}/stat").read().split()[2]
out["codes"] = codes
print(json.dumps(out))
"""


def test_the_reference_search_runs_checks_in_forked_children_that_see_the_code_on_disk(tmp_path):
    """The search imports the check's library modules once and forks a child per edit: the child must
    exit as `python CHECK` would (status, exceptions, CPU and wall limits, its own processes killed at
    the timeout), import the code under repair from disk (never from the parent), and the search must
    keep the same edit as with a fresh interpreter per check."""
    import json
    import os
    import subprocess
    import sys

    import clbench.agents.coderepair as reference

    script = str(Path(reference.__file__).with_name("coderepair_search.py"))
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("import asyncio\n\n\ndef limit(n):\n    return n < 3\n")
    check = tmp_path / "check.py"
    check.write_text(f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\nfrom pkg.mod import limit\n"
                     "sys.exit(0 if limit(3) else 1)\n")
    probe = subprocess.run([sys.executable, "-c", _FORK_PROBE, script, str(tmp_path), str(check)], capture_output=True,
                           text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    out = json.loads(probe.stdout)
    assert out["preloaded"] and out["asyncio"] and not out["pkg"]  # libraries here, the code under repair not
    assert out["passes_before_fix"] == 1 and out["passes_after_fix"] == 0
    codes = out["codes"]
    assert codes["exit3"][0] == 3 and codes["raises"][0] == 1
    assert codes["loops"][0] not in (0, -1) and codes["loops"][1] < 19  # SIGXCPU at 1 CPU s, before the wall limit
    assert codes["hangs"][0] == -1 and not out["grandchild_alive"]
    (pkg / "mod.py").write_text("import asyncio\n\n\ndef limit(n):\n    return n < 3\n")
    found = {}
    for fork in ("1", "0"):
        run = subprocess.run([sys.executable, script, str(check), str(pkg), "0", "50", "comparison", "limit",
                              f"{pkg / 'mod.py'}:limit"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "CLBENCH_SEARCH_FORK": fork}, cwd=tmp_path)
        found[fork] = run.stdout.strip()
        (pkg / "mod.py").write_text("import asyncio\n\n\ndef limit(n):\n    return n < 3\n")
    assert found["1"] == found["0"] and found["1"].startswith("FIXED 0 comparison ") and "<=" in found["1"]


def test_reference_sees_only_what_an_agent_sees_and_searches_a_fix(env):
    agent = make_agent("reference", env)
    assert not agent.privileged and agent.latent is None
    out = play(env, agent, "tenacity-04")  # map, find the tests, run them, check (fails), one search, submit
    # knowing nothing of the house it meets what its first guesses match there (2) and the test's behaviour
    assert out["steps"] == 6 and out["reward"] == pytest.approx(scored(3, 6))
    assert agent._fix_kind == "off_by_one"


def test_reference_finds_the_tests_inside_the_package_of_tenacity_7(env):
    agent = make_agent("reference", env)
    out = play(env, agent, "tenacity-11")
    assert out["steps"] == 6 and out["reward"] == pytest.approx(scored(2, 6)) and agent._fix_kind == "comparison"
    assert agent._tests.endswith(" tenacity/tests")


def test_reference_submits_without_a_fix_when_the_report_states_nothing_checkable(env):
    out = play(env, make_agent("reference", env), "tablib-02")  # the check passes on the buggy code
    assert out["steps"] == 5 and out["reward"] == 0.0


def test_reference_stateful_needs_fewer_steps_and_freeze_at_stops_learning(env):
    """After one tenacity 8.2.3 issue it knows the layout and test command: tenacity-04 in 3 steps, not 6."""
    agent, frozen, first = make_agent("reference", env), make_agent("reference", env, freeze_at=0), []
    for issue_id, traj in (("tenacity-13", first), ("tenacity-04", None)):
        out = play(env, agent, issue_id, stateless=False, traj=traj)
    # and the feedback of tenacity-13 revised two house conventions: one of the revisions is right
    assert out["steps"] == 3 and out["reward"] == pytest.approx(scored(4, 3)), out
    memory = agent.state_dict()["memory"]["tenacity"]
    assert memory["layout"] and memory["test_command"].endswith(" tests")
    assert memory["kinds"] == {"comparison": 1, "off_by_one": 1} and memory["blamed"] == {}
    replay(frozen, first)  # knowing nothing, frozen at 0 acts as the learner did on its first issue
    unfrozen = make_agent("reference", env)
    replay(unfrozen, first)  # the same evidence teaches an unfrozen one: the replay carries what freezing ignores
    assert unfrozen.state_dict()["memory"]["tenacity"]["layout"] and unfrozen.house != frozen.house
    assert frozen.state_dict() == {"memory": {}, "house": dict.fromkeys(frozen.house, 0)}


def test_stale_test_command_is_recognised_from_the_grading_feedback():
    """The end-of-issue evidence: failing tests outside the remembered test folder. Unfrozen the
    reference forgets the command (and finds the tests again next time); frozen it keeps it."""
    from clbench.agents.coderepair import CodeRepairReference, stale_tests

    old = "python -m pytest -q -x -p no:cacheprovider -o addopts= tenacity/tests"
    moved = "Tests that did not pass (1; the first 20):\n  tests/test_tenacity.py::TestWaitConditions::test_wait_chain: FAILED"
    same = "Tests that did not pass (1; the first 20):\n  tenacity/tests/test_tenacity.py::TestX::test_y: ERROR"
    assert stale_tests(old, moved) and not stale_tests(old, same) and not stale_tests(old, "Reward 1.000")
    assert not stale_tests(old.replace("tenacity/tests", "tests"), moved)
    first = ("--- Issue 14/26 ---\nTracker: #123\nRepository: jd/tenacity (tenacity 8.2.3), checked out at /testbed\n\n# A bug\n\n"
             "Fix the issue in the repository's source code (tenacity/; changes elsewhere are ignored). "
             "Submit with the submit tool or a command whose output ends with the line "
             "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT (`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`, alone or after the fix "
             "in the same command).")
    state = {"memory": {"tenacity": {"layout": True, "test_command": old, "kinds": {"comparison": 1}}}}
    for freeze_at, kept in ((None, ""), (13, old)):
        agent = CodeRepairReference({}, freeze_at=freeze_at)
        agent.load_state_dict(state)
        info = {"position": 13, "instance_id": "tenacity-02"}
        agent.begin_instance(first, info)
        assert agent.act(first, info).endswith("\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")  # nothing checkable
        agent.end_instance(0.0, info, f"Submitted after 1 steps. Reward 0.000.\n{moved}")
        assert agent.memory["tenacity"]["test_command"] == kept and agent.memory["tenacity"]["kinds"] == {"comparison": 1}


@pytest.mark.slow  # ~50 s of sandboxes; the v4 drift (house conventions) is checked by default
def test_the_drift_is_real_knowledge_from_7_goes_stale_on_8(env):
    """What the reference learned on tenacity 7.0.0 (tests in tenacity/tests) tests nothing on 8.2.3.
    Unfrozen, its search reports that the command tested nothing for an edit that passed the check:
    it finds the tests again and fixes the issue (three steps more than stateful with fresh
    knowledge). Frozen before 8.2.3 it keeps the old folder, its search confirms nothing, and the
    fix a fresh reference makes is lost."""
    learner = make_agent("reference", env)
    assert play(env, learner, "tenacity-11", stateless=False)["reward"] > 0  # 7.0.0: learns tenacity/tests
    assert learner.memory["tenacity"]["test_command"].endswith(" tenacity/tests")
    frozen = make_agent("reference", env, freeze_at=env.schedule.variant_starts()["tenacity-8.2.3"])
    frozen.load_state_dict(learner.state_dict())
    out = play(env, learner, "tenacity-04", stateless=False)  # check, search, tests, baseline, search, submit
    assert out["reward"] == pytest.approx(scored(3, 6)) and learner.memory["tenacity"]["test_command"].endswith(" tests")
    assert learner.memory["tenacity"]["kinds"] == {"comparison": 1, "off_by_one": 1}
    out = play(env, frozen, "tenacity-04", stateless=False)
    assert out["reward"] == 0.0 and frozen.memory["tenacity"]["test_command"].endswith(" tenacity/tests")
    assert frozen.memory["tenacity"]["kinds"] == {"comparison": 1}


def test_tenacity_7_tests_inside_the_package_are_not_graded(env):
    """In 7.0.0 the tests live below the source folder: edits there (a conftest that skips everything,
    emptied test bodies, a deleted test module) are ignored, so they earn nothing; a real fix next to
    them still counts."""
    env.reset(seed=0, options={"instance": "tenacity-11", "stateless": True})
    env.step("printf 'import pytest\\n\\n@pytest.fixture(autouse=True)\\ndef _s():\\n    pytest.skip()\\n'"
             " > tenacity/tests/conftest.py && sed -i 's/^\\( *\\)def test\\(.*\\):$/\\1def test\\2:\\n\\1    return/'"
             " tenacity/tests/test_tenacity.py && rm tenacity/tests/test_asyncio.py")
    obs, reward, term, _, info = env.step(f"echo {SPEC['submit_marker']}")
    assert term and reward == 0.0 and not info["solved"] and "issue tests 0/" in obs, obs
    assert info["details"]["changed_files"] == [] and set(info["details"]["ignored_files"]) == {
        "tenacity/tests/conftest.py", "tenacity/tests/test_tenacity.py", "tenacity/tests/test_asyncio.py"}
    agent = make_agent("oracle", env)
    obs, info = env.reset(seed=0, options={"instance": "tenacity-11", "stateless": True})
    env.step("rm tenacity/tests/test_tornado.py")
    obs, reward, term, _, info = env.step(agent.act(obs, info))
    assert term and reward == pytest.approx(scored(5, 2)), obs
    assert info["details"]["changed_files"] == ["tenacity/stop.py"]
    assert "tenacity/tests/test_tornado.py" in info["details"]["ignored_files"]


#: rewrites the test files not imported yet so that every test returns at once (either release's folder)
REWRITE_TESTS = """
import pathlib as _p, re as _re
for _f in [*_p.Path("/testbed/tests").glob("test_*.py"), *_p.Path("/testbed/tenacity/tests").glob("test_*.py")]:
    try:
        _f.write_text(_re.sub(r"(\\n(\\s+)def test\\w*\\(.*?\\):)", r"\\1\\n\\2    return", _f.read_text()))
    except OSError:
        pass
"""


def test_rewriting_tenacity_7_tests_from_the_package_scores_zero_bwrap(env):
    obs, reward, info = submit_attack(env, "tenacity-11", f"cat >> tenacity/__init__.py <<'EOF'\n{REWRITE_TESTS}EOF\n"
                                                          f"echo {SPEC['submit_marker']}")
    assert reward == 0.0 and not info["solved"] and "issue tests 0/" in obs, obs


@pytest.mark.docker
@pytest.mark.parametrize("issue_id", SAMPLE_PARAMS)
def test_oracle_under_docker(docker_env, issue_id):
    assert docker_env.backend == "docker"
    out = play(docker_env, make_agent("oracle", docker_env), issue_id)
    assert out["reward"] == 1.0 and out["steps"] == 1
    obs, *_ = docker_env.reset(seed=0, options={"instance": issue_id, "stateless": True})
    obs, *_ = docker_env.step("timeout 3 bash -c 'echo > /dev/tcp/pypi.org/443' 2>&1; id -u; ls /root 2>&1 | head -1")
    assert "1000" in obs and ("Permission denied" in obs or obs.count("\n") > 3)


def test_evaluation_ignores_links_and_large_files(tmp_path):
    """Host-side overlay never follows an agent's symlink into the host."""
    from clbench.sandbox.base import FileChange
    from clbench.envs.coderepair.checkout import overlay

    tree = tmp_path / "t"
    (tree / "tenacity").mkdir(parents=True)
    changes = [FileChange("tenacity/evil.py", "added", None, is_link=True),
               FileChange("tenacity/ok.py", "added", b"X = 1\n"),
               FileChange("setup.py", "modified", b"boom")]
    applied, ignored = overlay(tree, changes, "tenacity")
    assert applied == ["tenacity/ok.py"] and ignored == ["tenacity/evil.py", "setup.py"]
    assert not (tree / "tenacity" / "evil.py").exists() and not (tree / "setup.py").exists()
    assert re.fullmatch(r"X = 1\n", (tree / "tenacity" / "ok.py").read_text())


def test_the_env_never_imports_pytest_or_the_runner_and_recorder_it_copies():
    # pytest lives only in the sandbox's test runtime: the host side reads the runner and recorder as files
    import subprocess
    import sys

    code = ("import sys; import clbench.envs.coderepair.coderepair_env; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest', 'tenacity', 'tablib') "
            "or m.endswith(('grade_runner', 'recorder'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    from clbench.envs.coderepair import grading

    assert grading.RUNNER.is_file() and grading.RECORDER.is_file()


# ---------------------------------------------------------------------------------- nothing of the fix in reach
def check_no_reachable_copy(backend: str, repos: list[str]) -> None:
    """The copy scan (copies.py) inside each runtime: no file or archive member outside the checkout
    matches a module of any release on the schedule; a copy planted in the sandbox's /tmp is found
    (the scan can fail)."""
    from clbench.envs.coderepair.copies import reachable_copies

    e = gym.make(ENV, schedule="short", backend=backend).unwrapped
    try:
        for name in repos:
            plant = ""
            if name == repos[0]:  # a release module (from this checkout's release) copied out of the checkout
                src = SPEC["repos"][name]["source_root"]
                plant = f"mkdir -p /tmp/pkg && cp -r /testbed/{src} /tmp/pkg/ 2>/dev/null; true"
            result = reachable_copies(e, name, plant=plant, tree=e._checkout(load_issue(
                next(i for b in SPEC["schedules"]["default"] for i in b["issues"] if load_issue(i).repo == name))))
            outside = [m for m in result["matches"] if not m[0].startswith("/tmp/pkg/")]
            assert outside == [], (backend, name, outside[:10])
            if plant:
                assert any(m[0].startswith("/tmp/pkg/") for m in result["matches"]), (backend, name)
            assert result["scanned"] > 1000, result["scanned"]
    finally:
        e.close()


def test_no_copy_of_a_release_is_reachable_bwrap():
    check_no_reachable_copy(backend_or_skip("bwrap"), ["tenacity"])


@pytest.mark.slow
def test_no_copy_of_any_release_is_reachable_bwrap_all():
    check_no_reachable_copy(backend_or_skip("bwrap"), list(SPEC["repos"]))


@pytest.mark.slow  # minutes of hashing; the bwrap scan (the default backend) runs by default
@pytest.mark.docker
def test_no_copy_of_any_release_is_reachable_docker():
    check_no_reachable_copy(backend_or_skip("docker"), list(SPEC["repos"]))


def test_redteam_hooks_are_declared():
    """The attack policies are policy families (the generic red team plays them) and the copy scan is
    a red-team probe."""
    from clbench.agent import Agent
    from clbench.envs.coderepair.coderepair_env import CodeRepairEnv
    import importlib

    families = CodeRepairEnv.policy_families
    assert set(families) == {"vendored-restore", "grading-forgery", "house-guesser"}
    for cls_path, grid in families.values():
        module, cls = cls_path.split(":")
        assert issubclass(getattr(importlib.import_module(module), cls), Agent) and grid
    assert callable(CodeRepairEnv.redteam_probes()["reachable-copies"])


def test_public_secrets_cover_every_fix_and_stay_out_of_public_text():
    from clbench.envs.coderepair.coderepair_env import CodeRepairEnv

    secrets_ = CodeRepairEnv.public_secrets()
    assert "return max(max(0, self.min), min(result, self.max))" in secrets_
    assert "test_exponential_with_min_wait" in secrets_
    root = Path(__file__).resolve().parents[1]
    assert {"changelog.d", ".fixed", ".bugfix", "test_gh", "bugs/test_"} <= set(secrets_)  # the house's
    texts = [root / "README.md", *sorted((root / "docs").glob("*.md")), root / "tasks/coderepair/default.yaml"]
    texts += sorted(p for p in (root / "envs/coderepair").glob("*.py") if p.name != "house.py")
    for path in texts:
        text = path.read_text()
        if path.name == "default.yaml":  # the canonical world's written choices are data, not public text
            text = re.sub(r"\nhouse_conventions:\n(  - .*\n)+", "\n", text)
        found = [s for s in secrets_ if s in text]
        assert not found, (path.name, found[:3])


@pytest.mark.docker
@pytest.mark.slow
def test_a_silent_docker_command_longer_than_the_client_timeout_ends_normally(tmp_path):
    """The Docker SDK's 120 s socket timeout must not end a silent command's stream early (the copy
    scan and long test runs print nothing for minutes)."""
    from clbench.envs.coderepair.runtime import runtime_for
    from clbench.sandbox import Limits, open_sandbox

    backend_or_skip("docker")
    runtime = runtime_for("tenacity", SPEC["repos"]["tenacity"], SPEC["workdir"], "docker")
    with open_sandbox(tmp_path, backend="docker", runtime=runtime, workdir=SPEC["workdir"],
                      limits=Limits(timeout=300)) as sandbox:
        result = sandbox.run("sleep 130; echo done; exit 3", timeout=300)
    assert result.exit_code == 3 and result.stdout.strip() == "done" and result.killed is None


# ---------------------------------------------------------------------------------- house conventions (v4)
def _changes(files: dict):
    from clbench.sandbox.base import FileChange

    return [FileChange(path, "added", content.encode()) for path, content in files.items()]


def test_house_conventions_accept_exactly_one_of_each():
    """The file conventions on the host: the right fragment and test meet all four; a second fragment or
    test file (a shotgun over the common choices), or a second test function, meets none of theirs."""
    from clbench.envs.coderepair import house

    conv = house.Conventions({"fragment-folder": 2, "fragment-type": 0, "test-location": 3, "test-name": 1})
    right = {"changes.d/42.bugfix": "Fixed.\n", "tests/bugs/test_42.py": "def test_gh42():\n    assert 1\n",
             "repro.py": "print(1)\n", "src/tablib/core.py": "x = 1\n"}  # scratch and source files do not count
    review = house.review(_changes(right), conv, 42, "src/tablib", "tests")
    assert all(review.met.values()) and review.test_file[0] == "tests/bugs/test_42.py"
    shotgun = {**right, **{f"{folder}/42.{kind}": "Fixed.\n" for folder in house.CANDIDATES["fragment-folder"]
                           for kind in house.CANDIDATES["fragment-type"]}}
    met = house.review(_changes(shotgun), conv, 42, "src/tablib", "tests").met
    assert not met["fragment-folder"] and not met["fragment-type"] and met["test-location"]
    two_tests = {**right, "tests/test_regressions.py": "def test_gh42():\n    pass\n"}
    review = house.review(_changes(two_tests), conv, 42, "src/tablib", "tests")
    assert not review.met["test-location"] and not review.met["test-name"] and review.test_file is None
    hedged = {**right, "tests/bugs/test_42.py": "def test_gh42():\n    pass\n\n\ndef test_issue_42():\n    pass\n"}
    assert not house.review(_changes(hedged), conv, 42, "src/tablib", "tests").met["test-name"]
    wrong = {"changes.d/43.bugfix": "Fixed.\n", "changes.d/.x": "", "tests/test_42.py": "def test_gh42(): pass\n"}
    met = house.review(_changes(wrong), conv, 42, "src/tablib", "tests").met
    assert met == {"fragment-folder": True, "fragment-type": False, "test-location": False, "test-name": True}


def test_regression_test_behaviour_is_checked_on_both_trees(env, monkeypatch):
    """Run in sandboxes on the buggy and the fixed release: only a test that tells them apart meets it;
    one that always passes, always fails, exits early or collects nothing does not."""
    from clbench.agents.coderepair import source_test

    issue = load_issue("tenacity-11")
    latent = env.latent()["issues"]["tenacity-11"]
    path, name = latent["test_path"], latent["test_name"]
    good = source_test(name, issue.fix_diff, "tenacity")
    always_fails = f"def {name}():\n    assert False\n"
    cases = {good: True, f"def {name}():\n    pass\n": False, always_fails: False,
             f"import os\nos._exit(0)\n\n\ndef {name}():\n    pass\n": False, "X = 1\n": False}
    runs = []
    run = env._run_regression_test
    monkeypatch.setattr(env, "_run_regression_test", lambda *a: runs.append(a[2]) or run(*a))
    for source, want in cases.items():
        runs.clear()
        met = env.review(issue, "tenacity-7.0.0", _changes({path: source}))
        assert met["test-behaviour"] is want, source
        # the fixed tree runs only for a test that failed on the buggy one (here: the one that tells them apart)
        assert runs == ([False, True] if source in (good, always_fails) else [False]), (source, runs)


def test_feedback_names_conventions_never_values(env):
    """The lesson names the convention and its kind; no value of any era appears in the observation. The
    reward of a fix meeting no convention, submitted at the fourth step: (0.5 + 0) x (1 - 3/80)."""
    from clbench.envs.coderepair import house
    from clbench.envs.coderepair.coderepair_env import CodeRepairEnv

    agent = make_agent("oracle", env)
    obs, info = env.reset(seed=0, options={"instance": "tenacity-04", "stateless": True})
    fix = agent.act(obs, info).split("\nmkdir -p")[0]  # the fix alone, no fragment or test
    for _ in range(3):
        env.step("ls tenacity > /dev/null")
    obs2, reward, term, _, info = env.step(f"{fix}\necho {SPEC['submit_marker']}")
    assert term and info["solved"] and reward == pytest.approx(scored(0, 4)) and info["raw_metric"]["value"] == 3
    assert all(f"  {name}: not met ({house.LESSONS[name]})" in obs2 for name in house.NAMES), obs2
    house_secrets = {"changelog.d", ".fixed", ".bugfix", "test_gh", "bugs/test_", "test_bug_", "test_issue_"}
    assert house_secrets <= set(CodeRepairEnv.public_secrets())
    text = obs + obs2 + str(env.agent_card) + str(env.spec_card)
    assert not [s for s in house_secrets if s in text]


def test_world_seed_draws_conventions_numbers_and_order():
    """world_seed=N: another draw of each era's conventions (all but one change at the drift), of the
    tracker numbers and of each release's issue order; deterministic; the canonical world as written."""
    from clbench.envs.coderepair.coderepair_env import CodeRepairEnv

    canon = CodeRepairEnv(backend="bwrap")
    assert [e.choice for e in canon._eras] == [
        {"fragment-folder": 0, "fragment-type": 1, "test-location": 2, "test-name": 3},
        {"fragment-folder": 0, "fragment-type": 0, "test-location": 3, "test-name": 1}]
    assert [i.instance_id for v in canon.schedule.variants for i in v.instances] == ISSUES
    draws = []
    for seed in (1, 2, 3, 1):
        e = CodeRepairEnv(backend="bwrap", world_seed=seed)
        first, second = e._eras
        assert sum(first.choice[k] != second.choice[k] for k in first.choice) == 3
        order = [i.instance_id for v in e.schedule.variants for i in v.instances]
        assert sorted(order) == sorted(ISSUES) and [v.name for v in e.schedule.variants] == [
            b["variant"] for b in SPEC["schedules"]["default"]]
        draws.append(([x.choice for x in e._eras], dict(e._numbers), order))
    assert draws[0] == draws[3] and draws[0] != draws[1] != draws[2]
    assert len({d[2][0] for d in draws[:3]} | {ISSUES[0]}) > 1 or draws[0][0] != draws[1][0]


def test_reference_learns_the_house_from_lessons_and_frozen_does_not():
    from clbench.agents.coderepair import CodeRepairReference

    first = ("--- Issue 1/26 ---\nTracker: #7\nRepository: jd/tenacity (tenacity 8.2.3), checked out at /testbed\n\n"
             "# A bug\n\nFix the issue in the repository's source code (tenacity/; changes elsewhere are ignored). "
             "Submit with (`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`, alone or after the fix).")
    feedback = ("Submitted after 1 steps. Reward 0.000.\nHouse conventions not met (2):\n"
                "  fragment-type: not met (x)\n  test-name: not met (y)\n")
    for freeze_at, want in ((None, {"fragment-folder": 0, "fragment-type": 1, "test-location": 0, "test-name": 1}),
                            (0, {"fragment-folder": 0, "fragment-type": 0, "test-location": 0, "test-name": 0})):
        agent = CodeRepairReference({}, freeze_at=freeze_at)
        agent.load_state_dict({"memory": {"tenacity": {"layout": True, "test_command": "python -m pytest -q tests"}}})
        info = {"position": 0, "instance_id": "tenacity-02"}
        agent.begin_instance(first, info)
        command = agent.act(first, info)  # nothing to check in the report: the house files and the submission
        assert "changelog.d/7.bugfix" in command and "tests/regressions/test_issue_7.py" in command
        agent.end_instance(0.0, info, feedback)
        assert agent.house == want
        assert CodeRepairReference({}).load_state_dict(agent.state_dict()) is None


@pytest.mark.slow
@pytest.mark.parametrize("world_seed", [1, 2, 3])
def test_fresh_worlds_keep_the_difficulty(world_seed):
    """On the short schedule of a fresh world: the oracle meets every convention in one step (1.0), the
    stateless reference meets some of them (the most common choices), and stateful, on the second issue
    (same era, one lesson later), it keeps every convention it met and has revised the others. (Four issues
    are too few to show the gain after the drift, where the stateless guess of the most common choices
    meets more than an era-old belief: the full schedule's gain is measured by playing it.)"""
    backend_or_skip("bwrap")
    e = gym.make(ENV, schedule="short", backend="bwrap", world_seed=world_seed).unwrapped
    try:
        ids = [i.instance_id for v in e.schedule.variants for i in v.instances]
        oracle = [play(e, make_agent("oracle", e), i)["reward"] for i in ids]
        stateless = [play(e, make_agent("reference", e), i) for i in ids]
        learner = make_agent("reference", e)
        stateful = [play(e, learner, i, stateless=False) for i in ids]
    finally:
        e.close()
    assert oracle == [1.0] * len(ids)
    assert all(0 < r["reward"] < 1 for r in stateless), stateless
    first, second = (set(r["details"]["conventions_met"]) for r in stateless[:2])
    assert set(stateful[1]["details"]["conventions_met"]) >= second, (stateless, stateful)
    assert learner.house != dict.fromkeys(learner.house, 0) and first != set(house_names())


# ---------------------------------------------------------------------------------- fresh worlds
#: world seeds the computed checks cover: a few by default, 1-20 with CLBENCH_SLOW=1
WORLDS = range(1, 21) if os.environ.get("CLBENCH_SLOW") == "1" else (1, 2, 3)


def _draw_marginals(eras: list[list[tuple]]) -> list[dict]:
    """Exact per-era marginals of house.draw_eras over two eras: (convention index, choice) -> probability."""
    from clbench.envs.coderepair import house

    marg = [{}, {}]
    for first in eras[0]:
        nxt = [t for t in eras[1] if house._meets(first, t) == house.KEPT_AT_DRIFT]
        for era, choices, weight in ((0, [first], 1.0), (1, nxt, 1.0 / len(nxt))):
            for t in choices:
                for i, v in enumerate(t):
                    marg[era][i, v] = marg[era].get((i, v), 0.0) + weight / len(eras[0])
    return marg


def test_no_fixed_guess_of_the_house_beats_the_most_common_one_in_any_world():
    """Every world a draw can give (all enumerated, not sampled): each guess of the red team's family (each
    step along the lists, the canonical world's published choices of either era) meets at most as many of
    an era's conventions as the most common choices (the reference's guess), and fewer after the drift,
    while those meet at most three (something is left to learn). Over the draw's distribution (exact) the
    most common choice is the likeliest one of every convention in every era: as the reward is linear in
    the conventions met, no fixed guess of any kind beats the reference's on average over worlds."""
    from clbench.envs.coderepair import house

    canonical = house.written_eras(SPEC["house_conventions"])
    eras = house.era_choices(len(canonical), canonical)
    guesses = house.family_guesses(canonical)
    assert (1, 1, 1, 1) in guesses and tuple(canonical[1].choice[n] for n in house.DRAWN) in guesses
    for era, choices in enumerate(eras):
        assert len(choices) >= 20
        for t in choices:
            common = house._meets((0, 0, 0, 0), t)
            assert 1 <= common <= 3 and all(house._meets(g, t) <= common - (era == 1) for g in guesses), t
    for era, marg in enumerate(_draw_marginals(eras)):
        for i in range(len(house.DRAWN)):
            assert all(marg[i, 0] > marg.get((i, v), 0.0) for v in (1, 2, 3)), (era, i, marg)
        assert abs(sum(marg.values()) - len(house.DRAWN)) < 1e-9
    # the v4 draw (uniform, all but one changing) fails the same check: the family beat the reference
    # in 18 of worlds 1-20 (computed as below)


def test_fresh_worlds_computed_red_team_stays_below_the_reference():
    """Per world, from the stateless reference's per-issue outcomes (the same in every world: its actions do not
    depend on the conventions it cannot see; tests below and benchmarks/bench_coderepair.py compare with
    worlds played in full): r_reference is within a band of the canonical one and every fixed guess of the
    family stays below it. The same computation reproduces the canonical world's r_reference in default.yaml."""
    from clbench.envs.coderepair.coderepair_env import CodeRepairEnv
    from clbench.commands.worlds import BAND
    from clbench.envs.coderepair.worlds import REFERENCE_OUTCOMES, family_means

    backend_or_skip("bwrap")
    canon = family_means(CodeRepairEnv(backend="bwrap"), REFERENCE_OUTCOMES)
    assert canon["reference"] == pytest.approx(SPEC["r_reference"], abs=1e-9)
    assert max(v for k, v in canon.items() if k.startswith("house-guesser")) < canon["reference"]
    for seed in WORLDS:
        means = family_means(CodeRepairEnv(backend="bwrap", world_seed=seed), REFERENCE_OUTCOMES)
        ref = means.pop("reference")
        assert SPEC["r_reference"] - 1e-9 <= ref <= SPEC["r_reference"] + 0.04, (seed, ref)
        lo, hi = BAND["headroom_ratio"]  # the oracle's 1.0 in every world (played: benchmarks/bench_coderepair.py)
        assert lo <= (1.0 - ref) / (SPEC["r_max"] - SPEC["r_reference"]) <= hi, (seed, ref)
        assert max(means.values()) < ref - 0.01, (seed, ref, means)


def test_fresh_world_baselines_are_its_own_never_the_canonical_ones(tmp_path, monkeypatch):
    """world_seed=N has no r_max / r_reference until calibrated for that world (cached per world), never
    default.yaml's; the canonical world's come from default.yaml."""
    from clbench.calibration import store_baselines
    from clbench.envs.coderepair.coderepair_env import CodeRepairEnv

    backend_or_skip("bwrap")
    monkeypatch.setenv("CLBENCH_CACHE", str(tmp_path))
    fresh = CodeRepairEnv(backend="bwrap", world_seed=7)
    assert fresh.r_max is None and fresh.r_reference is None and not fresh.calibrated
    store_baselines(fresh, {"r_max": 1.0, "r_reference": 0.25})
    assert (fresh.r_max, fresh.r_reference) == (1.0, 0.25)
    assert CodeRepairEnv(backend="bwrap", world_seed=8).r_reference is None
    assert CodeRepairEnv(backend="bwrap").r_reference == pytest.approx(SPEC["r_reference"])


def test_computed_baselines_are_used_instead_of_playing(tmp_path, monkeypatch):
    """A fresh world's r_max and r_reference come from the env's computed_baselines() hook wherever baselines
    are ensured (a rollout, drift-check, `clbench worlds`), cached, nothing played; the canonical default
    keeps default.yaml's."""
    import gymnasium as gym

    from clbench.calibration import ensure_baselines
    from clbench.commands.worlds import baselines_source
    from clbench.envs.coderepair.coderepair_env import CodeRepairEnv
    from clbench.envs.coderepair.worlds import REFERENCE_OUTCOMES, family_means

    backend_or_skip("bwrap")
    monkeypatch.setenv("CLBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr("clbench.calibration.calibrate_world", lambda *a, **k: pytest.fail("played"))
    assert CodeRepairEnv(backend="bwrap").computed_baselines() is None
    assert baselines_source(ENV, {"backend": "bwrap"}) == "spec"
    assert baselines_source(ENV, {"backend": "bwrap", "world_seed": 4}) == "computed"
    assert baselines_source(ENV, {"backend": "bwrap", "world_seed": 4}) == "cached"
    fresh = CodeRepairEnv(backend="bwrap", world_seed=4)
    assert fresh.r_max == 1.0
    assert fresh.r_reference == pytest.approx(family_means(fresh, REFERENCE_OUTCOMES)["reference"])
    assert fresh.r_reference != pytest.approx(SPEC["r_reference"])
    env = gym.make(ENV, backend="bwrap", world_seed=5)
    try:
        assert env.unwrapped.r_reference is None  # per world, never shared
        assert ensure_baselines(env, {"backend": "bwrap", "world_seed": 5}, calibrate=False) is None
        assert env.unwrapped.r_reference == pytest.approx(family_means(env.unwrapped, REFERENCE_OUTCOMES)["reference"])
    finally:
        env.close()


@pytest.mark.slow  # ~16 plays of the reference's search (minutes on 2 cores)
def test_fresh_world_played_agrees_with_the_computation():
    """In a fresh world, the stateless reference and every house-guesser prior, played on the short schedule:
    each resolves the same issues as the reference, its regression test behaves the same, and it meets
    exactly the drawn conventions its fixed guess matches, so its reward is what the computation gives."""
    from clbench.envs.coderepair import house
    from clbench.envs.coderepair.worlds import era_guesses, issue_eras

    backend_or_skip("bwrap")
    e = gym.make(ENV, schedule="short", backend="bwrap", world_seed=5).unwrapped
    try:
        truth, eras = era_guesses(e), issue_eras(e)
        for iid, era in eras.items():
            seen = set()
            for prior in (0, 1, 2, 3):
                agent = make_agent("clbench.agents.coderepair_redteam:HouseGuesser", e, prior=prior)
                out = play(e, agent, iid)
                met = set(out["details"]["conventions_met"])
                drawn = {n for n, t in zip(house.DRAWN, truth[era]) if t == prior}
                assert met - {"test-behaviour"} == drawn, (iid, prior, met, truth[era])
                seen.add((out["solved"], "test-behaviour" in met))
                want = house.reward(len(met), out["steps"], e.max_steps) if out["solved"] else 0.0
                assert out["reward"] == pytest.approx(want)
            assert seen == {(True, True)}, (iid, seen)  # the short schedule: issues the reference resolves
    finally:
        e.close()


def test_stateful_reference_learns_the_house_in_every_fresh_world():
    """The reference's house learning alone (its real begin/end_instance, fed the lessons the env gives for
    each issue of the world's schedule, in the world's order): over the issues it resolves it meets more
    drawn conventions than its stateless guess in every world checked, so fresh worlds keep room to learn.
    (Right after the drift it can meet fewer: its belief is the era before's, the stateless guess the most
    common choices; the played gain and drift cost are in the spec card.) The normalized gain this gives (with
    the steps memory saves, as played in the canonical world) stays in the band of the canonical world's."""
    from clbench.agents.coderepair import CodeRepairReference
    from clbench.envs.coderepair import house
    from clbench.envs.coderepair.coderepair_env import CodeRepairEnv
    from clbench.commands.worlds import BAND
    from clbench.envs.coderepair.worlds import REFERENCE_OUTCOMES, era_guesses, family_means, issue_eras

    backend_or_skip("bwrap")
    gains, drift = {}, {}
    for seed in (None, *WORLDS):
        e = CodeRepairEnv(backend="bwrap", world_seed=seed)
        truth, eras = era_guesses(e), issue_eras(e)
        agent, learned, stateless, house_gain, after = CodeRepairReference({}), 0, 0, 0.0, []
        for slot in e.schedule.order(0):
            iid = slot.instance_id
            repo = e.spec_data["repos"][load_issue(iid).repo]
            obs = (f"Tracker: #{e._numbers[iid]}\nRepository: {repo['display']} ({repo['pypi']} {repo['version']}), "
                   f"checked out at /testbed\n\n# A bug\n\nFix the issue in the repository's source code "
                   f"({repo['source_root']}/; ...). Submit with (`echo {SPEC['submit_marker']}`).")
            info = {"position": slot.position, "instance_id": iid}
            agent.begin_instance(obs, info)
            met = {n: agent.house[n] == t for n, t in zip(house.DRAWN, truth[eras[iid]])}
            if iid in REFERENCE_OUTCOMES:
                learned += sum(met.values())
                stateless += sum(t == 0 for t in truth[eras[iid]])
                steps = REFERENCE_OUTCOMES[iid].steps
                house_gain += (house.reward(sum(met.values()) + 1, steps, e.max_steps)
                               - house.reward(sum(t == 0 for t in truth[eras[iid]]) + 1, steps, e.max_steps))
            if eras[iid] == 1:  # after the drift: frozen it fixes none; unfrozen it skips the 3 exploration steps
                out = REFERENCE_OUTCOMES.get(iid)
                after.append(house.reward(sum(met.values()) + 1, out.steps - 3, e.max_steps) if out else 0.0)
            agent.end_instance(0.0, info, "\n".join(house.lessons({**met, "test-behaviour": True})))
        assert learned > stateless, (seed, learned, stateless)
        r_ref = SPEC["r_reference"] if seed is None else family_means(e, REFERENCE_OUTCOMES)["reference"]
        gains[seed] = (house_gain / len(eras), r_ref)
        drift[seed] = sum(after) / len(after) / (1.0 - r_ref)  # the drift cost's share of the headroom
    # The normalized gain estimated from this: the house part, plus what memory of the layout and tests saves in
    # steps, which does not depend on the world: the canonical world's played stateful mean (0.2882, spec card)
    # minus its stateless mean and its house part. It assumes the stateful reference resolves the stateless one's
    # 8 issues: worlds 1 and 2 played first gave 0.061 and 0.071 (estimated 0.061, 0.071); world 2 replayed the
    # same, world 1 replayed (under load ~20) lost tenacity-04 (0.017, drift cost 0.216).
    steps_part = (0.2882 - SPEC["r_reference"]) - gains[None][0]
    estimate = {seed: (steps_part + h) / (1.0 - r) for seed, (h, r) in gains.items()}
    tol = max(BAND["gain_abs"], BAND["gain_rel"] * estimate[None])
    assert all(0 < g and abs(g - estimate[None]) <= tol for g in estimate.values()), estimate
    if 1 in estimate:
        assert abs(estimate[1] - 0.061) < 0.005 and abs(estimate[2] - 0.071) < 0.005, estimate
    # the drift cost the same way (played: canonical 0.291, worlds 1 and 2 0.283 and 0.298 per 8.2.3 issue)
    for seed, played in ((None, 0.291), (1, 0.283), (2, 0.298)):
        if seed in drift:
            assert abs(drift[seed] * (1.0 - gains[seed][1]) - played) < 0.005, (seed, drift)
    tol = max(BAND["drift_abs"], BAND["drift_rel"] * drift[None])
    assert all(abs(d - drift[None]) <= tol for d in drift.values()), drift


def test_a_submission_graded_once_is_not_run_again(env, monkeypatch):
    """Grading the same source changes again in one process reuses the first grading's records (the same
    verdict, no second sandbox run); other changes, or a run that was killed, are graded anew. The same
    holds for the review's regression-test runs."""
    from clbench.envs.coderepair import coderepair_env, evaluation
    from clbench.sandbox.base import FileChange

    monkeypatch.setattr(evaluation, "GRADED", evaluation.Kept(64))
    monkeypatch.setattr(coderepair_env, "REVIEWED", evaluation.Kept(256))
    issue = load_issue("tenacity-11")
    source = env._pristine(issue.repo) / "tenacity" / "__init__.py"
    edited = [FileChange("tenacity/__init__.py", "modified", source.read_bytes() + b"\n# a comment\n")]
    notes = [FileChange("changelog.d/1.fixed", "added", b"note\n")]  # not graded: ignored by the overlay
    first = env.evaluate(issue, [])  # (and the fixed tree's records, cached on disk)
    runs = []
    record = evaluation.record_tree
    monkeypatch.setattr(evaluation, "record_tree", lambda *a, **k: runs.append(1) or record(*a, **k))

    assert env.evaluate(issue, notes) == evaluation.Evaluation(
        first.resolved, first.fail_to_pass, first.pass_to_pass, [], ["changelog.d/1.fixed"])
    assert not runs and not first.resolved
    assert env.evaluate(issue, edited).fail_to_pass == first.fail_to_pass  # a comment fixes nothing
    assert len(runs) == 1

    monkeypatch.setattr(evaluation, "record_tree", lambda *a, **k: runs.append(1) or {})  # killed: nothing recorded
    for _ in range(2):
        assert env.evaluate(issue, edited + notes).fail_to_pass == first.fail_to_pass  # graded before: no run
    assert len(runs) == 1
    other = [FileChange("tenacity/__init__.py", "modified", source.read_bytes() + b"\n# another\n")]
    for _ in range(2):
        assert set(env.evaluate(issue, other).fail_to_pass.values()) == {"MISSING"}
    assert len(runs) == 3  # a killed run is not kept
    # a new process: the checkout as the agent got it (no source change) is not run again, its records are on disk
    monkeypatch.setattr(evaluation, "GRADED", evaluation.Kept(64))
    assert env.evaluate(issue, notes) == evaluation.Evaluation(
        first.resolved, first.fail_to_pass, first.pass_to_pass, [], ["changelog.d/1.fixed"])
    assert len(runs) == 3

    reviews = []
    run = env._regression_run
    monkeypatch.setattr(env, "_regression_run", lambda *a: reviews.append(a[3]) or run(*a))
    test = ("tests/test_issue.py", b"def test_issue():\n    assert False\n")
    assert [env._run_regression_test(issue, test, fixed).exit_code != 0 for fixed in (False, True, False, True)] \
        == [True] * 4
    assert reviews == [False, True]
