"""CodeRepair's house conventions: what the team's review checks besides the fix, stated nowhere.

Four conventions are drawn per world (and per era: they change at the declared drift) from
common practice of Python projects; a fifth is fixed:
- `fragment-folder`: the folder holding changelog fragments (towncrier style, one file per fix);
- `fragment-type`: the fragment's file name, `<issue number>.<type>`;
- `test-location`: where the one regression test file goes, below the project's tests folder;
- `test-name`: the regression test function's name;
- `test-behaviour`: the regression test fails on the release with the bug and passes on the
  fixed release (each run in a sandbox, the fixed one only when the buggy one failed; only the exit
  status is read, on the host).
Each is met or not; the feedback names the ones not met, never what they should have been.
This module holds the candidates an engineer would know (the support of the draws, most common
first) and the checks; the canonical world's choices are written in tasks/coderepair/default.yaml.

A fresh world's draw is accepted only when no fixed guess of a declared family (each step along
the lists, as the red team's `house-guesser` plays them, and the canonical world's published
choices of any era) meets more of an era's conventions than the most common choices, and fewer
after the drift; the most common choices meet at most three of the four. So in every world a
memoryless engineer's best guess of that family is the most common choices (the reference's),
and over the draws the most common choice is the likeliest one of each convention in each era:
as the reward is linear in the conventions met, no fixed guess of any kind beats it on average.
(A lucky guess can still match one world; only memory of the feedback finds it every time.)
"""
from __future__ import annotations

import ast
import itertools
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


#: how far a world's conventions may change at an era boundary: all but one of the drawn ones
KEPT_AT_DRIFT = 1


def _meets(guess: tuple, truth: tuple) -> int:
    return sum(g == t for g, t in zip(guess, truth))


def family_guesses(avoid: list[Conventions]) -> list[tuple]:
    """The fixed guesses a world must not favour: each step p >= 1 along every list (the red team's
    `house-guesser` priors) and each era of `avoid` (the canonical world's choices, which are public)."""
    steps = [tuple([p] * len(DRAWN)) for p in range(1, max(map(len, CANDIDATES.values())))]
    return steps + [tuple(c.choice[name] for name in DRAWN) for c in avoid]


def accepted(truth: tuple, last: bool, guesses: list[tuple]) -> bool:
    """Whether one era's choices (indices, in DRAWN order) may be drawn: the most common choices (index 0
    everywhere, the guess of an engineer who knows nothing of the team) meet at most three of them, and
    no guess of the family meets more of them than those do (in the last era: fewer)."""
    common = _meets((0,) * len(truth), truth)
    return common < len(truth) and all(_meets(g, truth) < common + (not last) for g in guesses)


def era_choices(eras: int, avoid: list[Conventions]) -> list[list[tuple]]:
    """Per era, every accepted choice that can start or continue a complete sequence of eras
    (each later era keeps KEPT_AT_DRIFT conventions and changes the others)."""
    guesses = family_guesses(avoid)
    every = list(itertools.product(*(range(len(CANDIDATES[name])) for name in DRAWN)))
    valid = [[t for t in every if accepted(t, e == eras - 1, guesses)] for e in range(eras)]
    for e in range(eras - 2, -1, -1):  # keep only choices with an accepted successor
        nxt = valid[e + 1]
        valid[e] = [t for t in valid[e] if any(_meets(t, u) == KEPT_AT_DRIFT for u in nxt)]
    return valid


def draw_eras(rng, eras: int, avoid: list[Conventions] = ()) -> list[Conventions]:
    """Conventions per era: the first era uniform over the accepted choices, each later one uniform over
    the accepted choices that keep one convention of the era before and change the other three.
    Acceptance (`accepted`) keeps every world's conventions from favouring any fixed guess of the
    family (`family_guesses`: each step along the lists and the canonical world's choices) over the
    most common choices, so the best fixed guess a memoryless agent can make, in any world and on
    average over worlds, is the most common choices (tests/test_coderepair.py checks both)."""
    valid = era_choices(eras, list(avoid))
    out: list[tuple] = []
    for e in range(eras):
        pool = valid[e] if not out else [t for t in valid[e] if _meets(out[-1], t) == KEPT_AT_DRIFT]
        out.append(pool[int(rng.integers(len(pool)))])
    return [Conventions(dict(zip(DRAWN, t))) for t in out]


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


def failed(on_buggy) -> bool:
    """The run on the buggy tree failed: any failure, a kill included, but not 'no tests collected' (exit 5)."""
    return bool(on_buggy.killed or on_buggy.exit_code not in (0, 5, None))


def behaviour_met(on_buggy, on_fixed) -> bool:
    """Fails on the buggy tree (`failed`) and passes on the fixed tree (exit 0)."""
    return bool(failed(on_buggy) and not on_fixed.killed and on_fixed.exit_code == 0)


def reward(met: int, steps: int, max_steps: int) -> float:
    """A resolved issue's reward: the fix, the conventions met (of five) and the steps it took."""
    return (0.5 + 0.5 * (met / len(NAMES))) * (1.0 - (steps - 1) / (2 * max_steps))


def lessons(met: dict) -> list[str]:
    return [f"  {name}: not met ({LESSONS[name]})" for name in NAMES if not met.get(name)]
