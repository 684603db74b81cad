"""The task data of CodeRepair: repositories and issues from tasks/coderepair/ (package data)."""
from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from functools import cache

import yaml


@dataclass(frozen=True)
class Issue:
    """One injected bug: the report shown to the agent and everything it must never see."""

    issue_id: str
    repo: str
    title: str
    text: str
    bug_diff: str
    fix_diff: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    #: (path in the tree, source) of a hidden test module written for the issue, not in the release:
    #: a check with literal expectations where the release's own tests compare two computed values
    #: (a round trip) or a random one; it exists only in the grading trees
    hidden_module: tuple[str, str] | None = None

    def with_hidden_module(self, tree) -> None:
        """Write the issue's own hidden test module into a grading tree (a no-op without one)."""
        if self.hidden_module is not None:
            path, source = self.hidden_module
            (tree / path).write_text(source)


@cache
def load_issue(issue_id: str) -> Issue:
    folder = importlib.resources.files("clbench.tasks") / "coderepair" / issue_id
    if not folder.is_dir():
        raise FileNotFoundError(f"no CodeRepair issue {issue_id!r} in clbench.tasks/coderepair")
    meta = yaml.safe_load((folder / "meta.yaml").read_text())
    module = meta.get("hidden_module")
    hidden = (module["path"], module["source"]) if module else None
    return Issue(issue_id=issue_id, repo=meta["repo"], title=meta["title"], text=(folder / "issue.md").read_text(),
                 bug_diff=(folder / "bug.diff").read_text(), fix_diff=(folder / "fix.diff").read_text(),
                 fail_to_pass=tuple(meta["fail_to_pass"]), pass_to_pass=tuple(meta["pass_to_pass"]),
                 hidden_module=hidden)
