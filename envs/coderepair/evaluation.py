"""Scoring a submission: the agent's source changes, applied to a fresh checkout with the hidden
tests restored, must make every FAIL_TO_PASS and PASS_TO_PASS test observe what it observes on
the fixed tree (grading.py: the sandbox records, the env's process compares). Tampering with the
record file scores 0.

A submission graded once in a process is not run again: its records are kept by what decides them
(`submission_key`: the issue, the runtime, the grading code and the source files the submission
changes). Rollouts of one agent submit the same trees again and again (no change at all, the same
fix found again), and a grading run is made repeatable on purpose (seeded draws, one wall clock per
test), so running it again would cost seconds and tell nothing new. A submission whose own code is
nondeterministic keeps the verdict of its first grading in that process. A submission that changes
no source file runs only the env's own code: its records are cached on the host, like the fixed tree's.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from clbench.envs.coderepair.checkout import apply_changes, buggy_tree, partition
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


class Kept:
    """The latest `size` results of sandbox runs this process need not repeat, by a key of what decides them."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[str, object] = OrderedDict()

    def get(self, key: str):
        item = self._items.get(key)
        if item is not None:
            self._items.move_to_end(key)
        return item

    def keep(self, key: str, item) -> None:
        self._items[key] = item
        while len(self._items) > self.size:
            self._items.popitem(last=False)


#: (records, test bounds) of the submissions graded in this process (a record set of the largest suite: a few
#: hundred kB)
GRADED = Kept(64)


def tree_records_key(issue, ids: list[str], runtime: str, tree: str) -> str:
    """`records_key` of one of the issue's trusted trees: the bug diff, `tree` (what makes this tree: the fix
    diff, or a tag of the unchanged checkout) with the hidden test module, the tests, the runtime."""
    hidden = str(issue.hidden_module) if issue.hidden_module else ""
    return records_key(issue.issue_id, issue.bug_diff, tree + hidden, ids, runtime)


def fixed_records_key(issue, ids: list[str], runtime: str) -> str:
    """`tree_records_key` of the issue's fixed tree."""
    return tree_records_key(issue, ids, runtime, issue.fix_diff)


def submission_key(issue, runtime: str, ids: list[str], changes, applied: list[str]) -> str:
    """What decides a submission's records: the issue's trees and tests, the runtime and grading code
    (`fixed_records_key`), and the changes grading applies (`partition`: path, kind, content)."""
    digest = hashlib.sha256(fixed_records_key(issue, ids, runtime).encode())
    kept = set(applied)
    for ch in sorted((c for c in changes if c.path in kept), key=lambda c: c.path):
        digest.update(f"\0{ch.path}\0{ch.kind}\0".encode())
        digest.update(hashlib.sha256(ch.content or b"").digest())
    return digest.hexdigest()


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


def cached_records(issue_id: str, name: str, make: Callable[[], dict]) -> dict:
    """Trusted records kept on the host at `<cache>/records/<name>.json`, outside every sandbox: made once
    by `make()` under the issue's lock; an empty result (a killed run) is not kept."""
    path = cache_root() / "records" / f"{name}.json"
    if path.is_file():
        return json.loads(path.read_text())
    with cache_lock(f"records-{issue_id}"):
        if path.is_file():
            return json.loads(path.read_text())
        records = make()
        if records:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp_path = path.with_suffix(".tmp")
            tmp_path.write_text(json.dumps(records, sort_keys=True))
            os.replace(tmp_path, path)
    return records


def expected_records(issue, pristine: Path, make_sandbox: Callable[[Path], Sandbox], timeout: float, workdir: str,
                     repo: dict, runtime: str) -> dict:
    """The fixed tree's stable records (two trusted runs), cached on the host outside any sandbox."""
    ids = [*issue.fail_to_pass, *issue.pass_to_pass]

    def make() -> dict:
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
        return stable

    return cached_records(issue.issue_id, f"{issue.issue_id}-{fixed_records_key(issue, ids, runtime)}", make)


def unchanged_records(issue, tree: Path, make_sandbox: Callable[[Path], Sandbox], timeout: float, workdir: str,
                      repo: dict, runtime: str) -> dict:
    """The records of `tree`, the checkout as the agent got it with the hidden tests restored (a submission
    that changes no source file: only the env's own code runs, as in the fixed tree's trusted runs), cached
    on the host like the fixed tree's. Most submissions of an agent that finds no fix are this tree."""
    ids = [*issue.fail_to_pass, *issue.pass_to_pass]
    key = tree_records_key(issue, ids, runtime, "unchanged\0")
    hidden_ids = list(issue.fail_to_pass)
    return cached_records(issue.issue_id, f"{issue.issue_id}-unchanged-{key}",
                          lambda: record_tree(tree, ids, hidden_ids, make_sandbox, timeout, workdir, repo))


def evaluate_tree(issue, pristine: Path, changes, make_sandbox: Callable[[Path], Sandbox], timeout: float,
                  workdir: str, repo: dict, runtime: str) -> Evaluation:
    """Fresh buggy checkout + the agent's changes below source_root, hidden tests restored, graded. A
    submission graded before in this process is judged on its kept records: no tree is built."""
    expected = expected_records(issue, pristine, make_sandbox, timeout, workdir, repo, runtime)
    f2p_ids, p2p_ids = list(issue.fail_to_pass), list(issue.pass_to_pass)
    ids = f2p_ids + p2p_ids
    graded, ignored = partition(changes, repo["source_root"], repo.get("tests_root", "tests"))
    applied = [ch.path for ch in graded]
    key = submission_key(issue, runtime, ids, changes, applied)
    kept = GRADED.get(key)
    if kept is None:
        with tempfile.TemporaryDirectory(prefix="clbench-eval-") as tmp:
            tree = buggy_tree(pristine, issue.bug_diff, Path(tmp) / "tree")
            apply_changes(tree, graded)
            issue.with_hidden_module(tree)
            bounds = bounds_of_tests(tree, ids)
            try:
                actual = (record_tree(tree, ids, f2p_ids, make_sandbox, timeout, workdir, repo) if graded
                          else unchanged_records(issue, tree, make_sandbox, timeout, workdir, repo, runtime))
            except Tampering:
                return Evaluation(False, {i: "FAILED" for i in f2p_ids}, {i: "FAILED" for i in p2p_ids}, applied,
                                  ignored, tampering=True)
        if actual:  # an empty set is a killed run: it proves nothing, so it runs again next time
            GRADED.keep(key, (actual, bounds))  # the bounds are read from the same tree's tests
    else:
        actual, bounds = kept
    outcomes = judge(expected, actual, ids, bounds)
    f2p = {i: outcomes[i] for i in f2p_ids}
    p2p = {i: outcomes[i] for i in p2p_ids}
    resolved = all(v == "PASSED" for v in [*f2p.values(), *p2p.values()])
    return Evaluation(resolved, f2p, p2p, applied, ignored)
