"""Building an issue's trees: the agent's checkout and the evaluation checkout.

agent checkout = pristine sdist + bug.diff, with the FAIL_TO_PASS test functions cut out of
their files (and a one-commit git repository, when git exists, so `git diff` works);
evaluation checkout = pristine sdist + bug.diff with every test intact, plus the agent's
changes below the repository's source root. Hidden tests therefore exist only in a tree the
agent never sees.
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
from pathlib import Path

from clbench.envs.coderepair.patching import apply_diff

_IGNORE = shutil.ignore_patterns(".clbench-sha256", "__pycache__", "*.pyc")
#: the one date of every file in a checkout (the import commit's), so no date singles out the bug
CHECKOUT_TIME = 1685577600  # 2023-06-01T00:00:00Z


def remove_tests(test_file: Path, node_ids: list[str]) -> None:
    """Cut the named tests (`Class::test` or `test`) out of a test module, decorators included."""
    wanted = {tuple(i.split("::")[1:]) for i in node_ids}
    source = test_file.read_text()
    tree = ast.parse(source)
    spans = []

    def visit(body, prefix):
        cut = 0
        for node in body:
            if isinstance(node, ast.ClassDef):
                if visit(node.body, prefix + (node.name,)) == len(node.body):  # keep the emptied class valid
                    spans[-1] = (*spans[-1][:2], " " * node.body[0].col_offset + "pass\n")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and prefix + (node.name,) in wanted:
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                spans.append((start, node.end_lineno, ""))
                wanted.discard(prefix + (node.name,))
                cut += 1
        return cut

    visit(tree.body, ())
    if wanted:
        raise ValueError(f"{test_file.name}: tests not found: {sorted(wanted)}")
    lines = source.splitlines(keepends=True)
    for start, end, keep in sorted(spans, reverse=True):
        lines[start - 1:end] = [keep] if keep else []
    test_file.write_text("".join(lines))


def buggy_tree(pristine: Path, bug_diff: str, dest: Path) -> Path:
    shutil.copytree(pristine, dest, ignore=_IGNORE, symlinks=True)
    apply_diff(dest, bug_diff)
    return dest


def agent_checkout(pristine: Path, bug_diff: str, hidden: list[str], dest: Path) -> Path:
    """The tree the agent works on: buggy, without the FAIL_TO_PASS tests."""
    buggy_tree(pristine, bug_diff, dest)
    by_file: dict[str, list[str]] = {}
    for node_id in hidden:
        by_file.setdefault(node_id.split("::")[0], []).append(node_id)
    for rel, ids in by_file.items():
        if (dest / rel).is_file():  # an issue's own hidden module exists only in grading trees
            remove_tests(dest / rel, ids)
    normalize_tree(dest)
    init_git(dest)
    normalize_tree(dest)
    return dest


def normalize_tree(root: Path, atime: int = CHECKOUT_TIME) -> None:
    """Every file and folder below root alike: one modification date, one access date, 0644 files,
    0755 folders. Run again on each sandbox's copy, whose copying read (and so dated) every file,
    with an access date a little ahead of the change dates the pass sets: under relatime (the
    default) reading a file or listing a folder then never moves it, whoever reads.
    """
    entries = [(root, True)]
    for dirpath, dirnames, filenames in os.walk(root):  # list everything first: listing a folder dates it
        entries += [(Path(dirpath, d), True) for d in dirnames] + [(Path(dirpath, f), False) for f in filenames]
    for path, is_dir in entries:
        if not path.is_symlink():
            path.chmod(0o755 if is_dir else 0o644)
        os.utime(path, (atime, CHECKOUT_TIME), follow_symlinks=False)


def init_git(tree: Path) -> None:
    """One deterministic commit of the starting tree (skipped when git is not installed)."""
    git = shutil.which("git")
    if git is None:
        return
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tree), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "clbench", "GIT_AUTHOR_EMAIL": "clbench@localhost",
           "GIT_COMMITTER_NAME": "clbench", "GIT_COMMITTER_EMAIL": "clbench@localhost",
           "GIT_AUTHOR_DATE": "2023-06-01T00:00:00Z", "GIT_COMMITTER_DATE": "2023-06-01T00:00:00Z"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "Import release sources"]):
        subprocess.run([git, "-c", "core.hooksPath=/dev/null", *args], cwd=tree, env=env, check=True,
                       capture_output=True)
    shutil.rmtree(tree / ".git" / "hooks", ignore_errors=True)  # no sample hooks in the workspace


def partition(changes, source_root: str, tests_root: str = "tests") -> tuple[list, list[str]]:
    """The agent's changes that grading applies (files below `source_root`, except those below `tests_root`:
    a release may ship its tests inside the package, as tenacity 7 does) and the paths it ignores."""
    graded, ignored = [], []
    prefix = source_root.strip("/") + "/"
    tests = tests_root.strip("/") + "/"
    for ch in changes:
        if (not ch.path.startswith(prefix) or ch.path.startswith(tests) or ch.is_link
                or (ch.kind != "deleted" and ch.content is None)):
            ignored.append(ch.path)
        else:
            graded.append(ch)
    return graded, ignored


def apply_changes(tree: Path, changes) -> None:
    """Write `partition`'s graded changes into `tree`."""
    for ch in changes:
        target = tree / ch.path
        if ch.kind == "deleted":
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(ch.content)


def overlay(tree: Path, changes, source_root: str, tests_root: str = "tests") -> tuple[list[str], list[str]]:
    """Apply the agent's graded changes (`partition`) to `tree`; returns (applied, ignored) paths."""
    graded, ignored = partition(changes, source_root, tests_root)
    apply_changes(tree, graded)
    return [ch.path for ch in graded], ignored
