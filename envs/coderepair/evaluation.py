"""Scoring a submission: the agent's source changes, applied to a fresh checkout with the hidden
tests restored, must make every FAIL_TO_PASS and PASS_TO_PASS test observe what it observes on
the fixed tree (grading.py: the sandbox records, the env's process compares). Tampering with the
record file scores 0.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from clbench.envs.coderepair.checkout import buggy_tree, overlay
from clbench.envs.coderepair.grading import (Tampering, judge, lock_tests, plan_grading, pytest_ini, read_recording,
                                             records_key, stable_records, bounds_of_tests, write_job)
from clbench.envs.coderepair.patching import apply_diff
from clbench.envs.coderepair.sources import cache_lock, cache_root
from clbench.sandbox import Sandbox


@dataclass
class Evaluation:
    resolved: bool
    fail_to_pass: dict[str, str] = field(default_factory=dict)
    pass_to_pass: dict[str, str] = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    #: the record file was not the runner's: scores 0, and nothing more is said
    tampering: bool = False

    def summary(self) -> str:
        if self.tampering:
            return "not resolved: tampering"
        f2p = sum(v == "PASSED" for v in self.fail_to_pass.values())
        p2p = sum(v == "PASSED" for v in self.pass_to_pass.values())
        return (f"{'resolved' if self.resolved else 'not resolved'}: issue tests {f2p}/{len(self.fail_to_pass)} "
                f"pass, other tests {p2p}/{len(self.pass_to_pass)} pass")


def record_tree(tree: Path, ids: list[str], hidden: list[str], make_sandbox: Callable[[Path], Sandbox],
                timeout: float, workdir: str, repo: dict, rename: bool = True) -> dict:
    """Run the rewritten tests on `tree` (consumed) in a sandbox; the records, read back as untrusted
    data (raises Tampering)."""
    plan = plan_grading(tree, hidden, [i for i in ids if i not in hidden], rename=rename)
    write_job(plan, tree, repo["import_root"], pytest_ini(repo.get("pytest_ini")))
    with make_sandbox(tree) as sandbox:
        lock_tests(sandbox.host_workspace, repo.get("tests_root", "tests"))
        result = sandbox.run(plan.command(workdir), timeout=timeout)
        if result.killed:
            return {}  # a killed run proves nothing
        return read_recording(sandbox.host_workspace, plan)


def expected_records(issue, pristine: Path, make_sandbox: Callable[[Path], Sandbox], timeout: float, workdir: str,
                     repo: dict, runtime: str) -> dict:
    """The fixed tree's stable records (two trusted runs), cached on the host outside any sandbox."""
    ids = [*issue.fail_to_pass, *issue.pass_to_pass]
    key = records_key(issue.issue_id, issue.bug_diff, issue.fix_diff + (str(issue.hidden_module) if issue.hidden_module else ""),
                      ids, runtime)
    path = cache_root() / "records" / f"{issue.issue_id}-{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    with cache_lock(f"records-{issue.issue_id}"):
        if path.is_file():
            return json.loads(path.read_text())
        runs = []
        for _ in range(2):
            with tempfile.TemporaryDirectory(prefix="clbench-fixed-") as tmp:
                tree = buggy_tree(pristine, issue.bug_diff, Path(tmp) / "tree")
                apply_diff(tree, issue.fix_diff)
                issue.with_hidden_module(tree)
                if not runs:  # the test modules are the same in both runs
                    bounds = bounds_of_tests(tree, ids)
                runs.append(record_tree(tree, ids, list(issue.fail_to_pass), make_sandbox, timeout, workdir, repo))
        stable = stable_records(*runs, bounds=bounds)
        missing = [i for i in ids if not stable.get(i)]
        if missing:
            raise RuntimeError(f"{issue.issue_id}: the fixed tree gave no stable records for {missing[:5]}")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp_path = path.with_suffix(".tmp")
        tmp_path.write_text(json.dumps(stable, sort_keys=True))
        os.replace(tmp_path, path)
    return stable


def evaluate_tree(issue, pristine: Path, changes, make_sandbox: Callable[[Path], Sandbox], timeout: float,
                  workdir: str, repo: dict, runtime: str) -> Evaluation:
    """Fresh buggy checkout + the agent's changes below source_root, hidden tests restored, graded."""
    expected = expected_records(issue, pristine, make_sandbox, timeout, workdir, repo, runtime)
    f2p_ids, p2p_ids = list(issue.fail_to_pass), list(issue.pass_to_pass)
    with tempfile.TemporaryDirectory(prefix="clbench-eval-") as tmp:
        tree = buggy_tree(pristine, issue.bug_diff, Path(tmp) / "tree")
        applied, ignored = overlay(tree, changes, repo["source_root"], repo.get("tests_root", "tests"))
        issue.with_hidden_module(tree)
        bounds = bounds_of_tests(tree, f2p_ids + p2p_ids)
        try:
            actual = record_tree(tree, f2p_ids + p2p_ids, f2p_ids, make_sandbox, timeout, workdir, repo)
        except Tampering:
            return Evaluation(False, {i: "FAILED" for i in f2p_ids}, {i: "FAILED" for i in p2p_ids}, applied, ignored,
                              tampering=True)
    outcomes = judge(expected, actual, f2p_ids + p2p_ids, bounds)
    f2p = {i: outcomes[i] for i in f2p_ids}
    p2p = {i: outcomes[i] for i in p2p_ids}
    resolved = all(v == "PASSED" for v in [*f2p.values(), *p2p.values()])
    return Evaluation(resolved, f2p, p2p, applied, ignored)
