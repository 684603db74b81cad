"""Scoring a submission: the agent's source changes, applied to a fresh checkout with the hidden
tests restored, must make every FAIL_TO_PASS and PASS_TO_PASS test pass (run in the sandbox).
"""
from __future__ import annotations

import re
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from clbench.envs.coderepair.checkout import buggy_tree, overlay
from clbench.sandbox import Sandbox

RESULTS_FILE = ".clbench-test-results.txt"
_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS|SUBPASSED|SUBFAILED)(?:\(.*?\))? (\S+)")


def pytest_command(node_ids: list[str]) -> str:
    """pytest on exactly these tests, one status line per test, coverage and caches off."""
    ids = " ".join(shlex.quote(i) for i in node_ids)
    return (f"python -m pytest -p no:cacheprovider -o addopts= -rA -q --tb=short --no-header {ids} "
            f"> {RESULTS_FILE} 2>&1; echo pytest exit $?")


def parse_outcomes(text: str) -> dict[str, str]:
    """node id -> PASSED / FAILED / SKIPPED ...; a test with any failed subtest is FAILED."""
    status: dict[str, str] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        kind, node = m.group(1), m.group(2)
        if kind in ("FAILED", "ERROR", "SUBFAILED"):
            status[node] = "FAILED"
        elif status.get(node) != "FAILED":
            status[node] = "PASSED" if kind in ("PASSED", "SUBPASSED") else kind
    return status


@dataclass
class Evaluation:
    resolved: bool
    fail_to_pass: dict[str, str] = field(default_factory=dict)
    pass_to_pass: dict[str, str] = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def summary(self) -> str:
        f2p = sum(v == "PASSED" for v in self.fail_to_pass.values())
        p2p = sum(v == "PASSED" for v in self.pass_to_pass.values())
        return (f"{'resolved' if self.resolved else 'not resolved'}: issue tests {f2p}/{len(self.fail_to_pass)} "
                f"pass, other tests {p2p}/{len(self.pass_to_pass)} pass")


def run_tests(sandbox: Sandbox, node_ids: list[str], timeout: float) -> dict[str, str]:
    result = sandbox.run(pytest_command(node_ids), timeout=timeout)
    try:
        text = sandbox.read_text(RESULTS_FILE)
    except (OSError, RuntimeError):
        text = ""
    outcomes = parse_outcomes(text)
    if result.killed:
        outcomes = {i: "FAILED" for i in node_ids}  # a killed run proves nothing
    return {i: outcomes.get(i, "MISSING") for i in node_ids}


def evaluate_tree(pristine: Path, bug_diff: str, changes, source_root: str, fail_to_pass: list[str],
                  pass_to_pass: list[str], make_sandbox: Callable[[Path], Sandbox], timeout: float) -> Evaluation:
    """Fresh buggy checkout + the agent's changes below source_root, hidden tests restored, run."""
    with tempfile.TemporaryDirectory(prefix="clbench-eval-") as tmp:
        tree = buggy_tree(pristine, bug_diff, Path(tmp) / "tree")
        applied, ignored = overlay(tree, changes, source_root)
        with make_sandbox(tree) as sandbox:
            outcomes = run_tests(sandbox, fail_to_pass + pass_to_pass, timeout)
    f2p = {i: outcomes[i] for i in fail_to_pass}
    p2p = {i: outcomes[i] for i in pass_to_pass}
    resolved = all(v == "PASSED" for v in [*f2p.values(), *p2p.values()])
    return Evaluation(resolved, f2p, p2p, applied, ignored)
