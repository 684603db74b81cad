"""CodeRepair's house conventions: what the team's review checks besides the fix, stated nowhere.

Four conventions are drawn per world (and per era: they change at the declared drift) from
common practice of Python projects; a fifth is fixed:
- `fragment-folder`: the folder holding changelog fragments (towncrier style, one file per fix);
- `fragment-type`: the fragment's file name, `<issue number>.<type>`;
- `test-location`: where the one regression test file goes, below the project's tests folder;
- `test-name`: the regression test function's name;
- `test-behaviour`: the regression test fails on the release with the bug and passes on the
  fixed release (both run in sandboxes; only the exit status is read, on the host).
Each is met or not; the feedback names the ones not met, never what they should have been.
This module holds the candidates an engineer would know (the support of the draws) and the
checks; the canonical world's choices are written in tasks/coderepair/default.yaml.
"""
from __future__ import annotations

import ast
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

#: per convention, the common choices a world draws from (`{n}`: the issue's tracker number)
CANDIDATES: dict[str, tuple[str, ...]] = {
    "fragment-folder": ("changelog.d", "newsfragments", "changes.d", "release-notes"),
    "fragment-type": ("bugfix", "fixed", "bug", "fix"),
    "test-location": ("regressions/test_issue_{n}.py", "test_regressions.py", "test_issue_{n}.py",
                      "bugs/test_{n}.py"),
    "test-name": ("test_issue_{n}", "test_gh{n}", "test_regression_{n}", "test_bug_{n}"),
}
DRAWN = tuple(CANDIDATES)
NAMES = (*DRAWN, "test-behaviour")
#: the lesson the feedback gives for a convention not met (the kind, never the value)
LESSONS = {
    "fragment-folder": "the changelog fragment is missing, not alone, or not in the folder the project keeps them in",
    "fragment-type": "the changelog fragment's file name is not the project's `<issue number>.<type>` form",
    "test-location": "the regression test file is missing, not alone, or not where the project keeps them",
    "test-name": "the regression test function is not named the way the project names them",
    "test-behaviour": "the regression test does not fail on the release with the bug and pass on the fixed release",
}
MAX_TEST_BYTES = 200_000


@dataclass(frozen=True)
class Conventions:
    """One era's choices: convention name -> index into CANDIDATES."""

    choice: dict

    def value(self, name: str, number: int) -> str:
        return CANDIDATES[name][self.choice[name]].format(n=number)

    def fragment_path(self, number: int) -> str:
        return f"{self.value('fragment-folder', number)}/{number}.{self.value('fragment-type', number)}"

    def test_path(self, tests_root: str, number: int) -> str:
        return f"{tests_root.strip('/')}/{self.value('test-location', number)}"


def draw_eras(rng, eras: int) -> list[Conventions]:
    """Conventions per era: the first drawn uniformly; at each later era all but one change."""
    first = {name: int(rng.integers(len(CANDIDATES[name]))) for name in DRAWN}
    out = [Conventions(first)]
    for _ in range(eras - 1):
        prev = out[-1].choice
        kept = DRAWN[int(rng.integers(len(DRAWN)))]
        nxt = {}
        for name in DRAWN:
            if name == kept:
                nxt[name] = prev[name]
            else:
                others = [i for i in range(len(CANDIDATES[name])) if i != prev[name]]
                nxt[name] = others[int(rng.integers(len(others)))]
        out.append(Conventions(nxt))
    return out


def written_eras(spec: list[dict]) -> list[Conventions]:
    """The canonical world's eras as written in the task spec (values by name)."""
    return [Conventions({name: CANDIDATES[name].index(era[name]) for name in DRAWN}) for era in spec]


def _is_test_file(path: str, tests_root: str) -> bool:
    name = PurePosixPath(path).name
    return path.endswith(".py") and (path.startswith(tests_root.rstrip("/") + "/") or name.startswith("test"))


def _is_fragment(path: str, source_root: str, tests_root: str) -> bool:
    parts = PurePosixPath(path).parts
    return (not path.endswith((".py", ".pyc")) and not any(p.startswith(".") for p in parts)
            and not path.startswith(source_root.rstrip("/") + "/") and not path.startswith(tests_root.rstrip("/") + "/"))


def test_functions(source: bytes) -> list[str]:
    """Names of the test functions in a module (top level and in classes), parsed, never run."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    names = []
    for node in tree.body:
        body = node.body if isinstance(node, ast.ClassDef) else [node]
        names += [n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.name.startswith("test")]
    return names


@dataclass
class Review:
    """The static part of a review: which drawn conventions a submission meets, and its one regression
    test file (path, content) for the behaviour check, if it has exactly one."""

    met: dict
    test_file: tuple[str, bytes] | None


def review(changes, conv: Conventions, number: int, source_root: str, tests_root: str) -> Review:
    """Check the submission's changes (untrusted bytes, only read) against an era's conventions."""
    live = [c for c in changes if c.kind != "deleted" and not c.is_link and c.content is not None]
    fragments = [c for c in live if _is_fragment(c.path, source_root, tests_root)]
    tests = [c for c in live if _is_test_file(c.path, tests_root)]
    met = dict.fromkeys(DRAWN, False)
    if len(fragments) == 1 and fragments[0].content.strip():
        path = PurePosixPath(fragments[0].path)
        met["fragment-folder"] = str(path.parent) == conv.value("fragment-folder", number)
        met["fragment-type"] = path.name == f"{number}.{conv.value('fragment-type', number)}"
    test_file = None
    if len(tests) == 1 and tests[0].kind == "added" and len(tests[0].content) <= MAX_TEST_BYTES:
        test_file = (tests[0].path, tests[0].content)
        met["test-location"] = tests[0].path == conv.test_path(tests_root, number)
        met["test-name"] = test_functions(tests[0].content) == [conv.value("test-name", number)]
    return Review(met, test_file)


def regression_command(workdir: str, import_root: str, path: str, ini_path: str) -> str:
    """Runs one regression test file with the test runtime's pytest (exit status read on the host)."""
    return (f'cd "${{WORKSPACE:-{workdir}}}" && PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 '
            f'PYTHONPATH="$PWD/{import_root}" "$VIRTUAL_ENV/bin/python" -B -m pytest -c {shlex.quote(ini_path)} '
            f"--rootdir . --noconftest -p no:cacheprovider -q -x {shlex.quote(path)}")


def behaviour_met(on_buggy, on_fixed) -> bool:
    """Fails on the buggy tree (any failure, a kill included, but not 'no tests collected': exit 5)
    and passes on the fixed tree (exit 0)."""
    failed = on_buggy.killed or on_buggy.exit_code not in (0, 5, None)
    return bool(failed and not on_fixed.killed and on_fixed.exit_code == 0)


def lessons(met: dict) -> list[str]:
    return [f"  {name}: not met ({LESSONS[name]})" for name in NAMES if not met.get(name)]
