"""Scoring a submission: the agent's source changes, applied to a fresh checkout with the hidden
tests restored, must make every FAIL_TO_PASS and PASS_TO_PASS test pass (run in the sandbox),
under grading the code under test cannot forge (grading.py): any tampering scores 0.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from clbench.envs.coderepair.checkout import buggy_tree, overlay
from clbench.envs.coderepair.grading import lock_tests, plan_grading, pytest_ini, read_verdict, write_job
from clbench.sandbox import Sandbox


@dataclass
class Evaluation:
    resolved: bool
    fail_to_pass: dict[str, str] = field(default_factory=dict)
    pass_to_pass: dict[str, str] = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    #: why the grading does not trust the test run (empty when it does); any entry scores 0
    tampering: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.tampering:
            return f"not resolved: tampering with the test run detected ({'; '.join(self.tampering)})"
        f2p = sum(v == "PASSED" for v in self.fail_to_pass.values())
        p2p = sum(v == "PASSED" for v in self.pass_to_pass.values())
        return (f"{'resolved' if self.resolved else 'not resolved'}: issue tests {f2p}/{len(self.fail_to_pass)} "
                f"pass, other tests {p2p}/{len(self.pass_to_pass)} pass")


def grade_tree(tree: Path, fail_to_pass: list[str], pass_to_pass: list[str], make_sandbox: Callable[[Path], Sandbox],
               timeout: float, workdir: str, repo: dict) -> tuple[dict[str, str], list[str]]:
    """Run the tests on `tree` (consumed: canaries are planted in it); (outcome per id, tampering)."""
    plan = plan_grading(tree, fail_to_pass, pass_to_pass)
    write_job(plan, tree, repo["import_root"], pytest_ini(repo.get("pytest_ini")))
    with make_sandbox(tree) as sandbox:
        lock_tests(sandbox.host_workspace, repo.get("tests_root", "tests"))
        result = sandbox.run(plan.command(workdir), timeout=timeout)
    verdict = read_verdict(plan, result.stdout, killed=result.killed is not None)
    by_run_id = verdict.outcomes
    outcomes = {i: by_run_id[plan.hidden.get(i, i)] for i in fail_to_pass + pass_to_pass}
    if result.killed:
        outcomes = {i: "FAILED" for i in outcomes}  # a killed run proves nothing
    return outcomes, verdict.tampering


def evaluate_tree(pristine: Path, bug_diff: str, changes, fail_to_pass: list[str], pass_to_pass: list[str],
                  make_sandbox: Callable[[Path], Sandbox], timeout: float, workdir: str, repo: dict) -> Evaluation:
    """Fresh buggy checkout + the agent's changes below source_root, hidden tests restored, graded."""
    with tempfile.TemporaryDirectory(prefix="clbench-eval-") as tmp:
        tree = buggy_tree(pristine, bug_diff, Path(tmp) / "tree")
        applied, ignored = overlay(tree, changes, repo["source_root"], repo.get("tests_root", "tests"))
        outcomes, tampering = grade_tree(tree, fail_to_pass, pass_to_pass, make_sandbox, timeout, workdir, repo)
    f2p = {i: outcomes[i] for i in fail_to_pass}
    p2p = {i: outcomes[i] for i in pass_to_pass}
    resolved = not tampering and all(v == "PASSED" for v in [*f2p.values(), *p2p.values()])
    return Evaluation(resolved, f2p, p2p, applied, ignored, tampering)
