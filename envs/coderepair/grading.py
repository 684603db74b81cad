"""Grading the code under test cannot forge.

The evaluation checkout is rebuilt on the host from the pristine sdist (only the agent's changes
below the source root are applied), then, afresh for each grading and with `secrets` (so nothing
about them follows from the env's seed):
- the hidden FAIL_TO_PASS tests get new names, drawn like the canaries' from the words of the
  module's real test names, so code cannot single them out by name;
- canary tests are planted beside them, in the same modules and classes, named the same way:
  some must fail (a false assertion, a raised exception), some must error (a missing fixture).
  A canary reported any other way, while its module ran, is tampering;
- grade_runner.py and its job (the ids and a per-grading HMAC key) go to a fresh folder; the
  runner deletes the job before any repository code runs and signs its verdict with the key.
  A missing verdict (the process ended early, e.g. os._exit at import), a forged verdict line,
  or integrity problems reported by the runner are tampering too.
When clbench runs as root the test files belong to root and are read-only in the sandbox, whose
commands run as another uid (otherwise the runner's hashes of them detect edits). Residual risk:
code written against this grader could, in the test process, find the key in memory or tell
canaries from real tests by their bodies; generic forgery (forcing outcomes, exiting early,
printing reports, patching pytest) is caught. Any tampering scores the submission 0.
"""
from __future__ import annotations

import shutil
import ast
import hmac
import json
import hashlib
import os
import re
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path

#: the runner copied into each grading folder; read as a file, never imported here (it imports
#: pytest, which only the sandbox's test runtime must have)
RUNNER = Path(__file__).with_name("grade_runner.py")
#: the runner's verdict line prefix (grade_runner.TAG; a test checks they agree)
TAG = "CLBENCH-VERDICT"

_WORD = re.compile(r"[a-z0-9]+")
_PYTEST_FIXTURES = {"tmp_path", "tmp_path_factory", "tmpdir", "tmpdir_factory", "record_property", "capsys",
                    "record_xml_attribute", "record_testsuite_property", "doctest_namespace", "pytestconfig",
                    "monkeypatch", "recwarn", "caplog", "capfd", "subtests", "request", "cache", "testdir",
                    "pytester", "capsysbinary", "capfdbinary", "event_loop"}


@dataclass
class GradingPlan:
    """What one grading runs: test ids (renamed hidden tests and canaries included) and its key."""

    folder: str
    key: str
    run_ids: list[str]
    hidden: dict[str, str]  # original FAIL_TO_PASS id -> the id it runs under
    canaries: dict[str, str] = field(default_factory=dict)  # id -> "F" (must fail) or "E" (must error)

    def command(self, workdir: str) -> str:
        """The test runtime's python (read-only, never the workspace's), isolated mode, in the checkout
        (unsafe-local names its host folder $WORKSPACE)."""
        return (f'cd "${{WORKSPACE:-{workdir}}}" && "$VIRTUAL_ENV/bin/python" -I -B '
                f"{shlex.quote(self.folder)}/runner.py")


@dataclass
class Verdict:
    outcomes: dict[str, str]  # run id -> P F E S M
    tampering: list[str]


class _Module:
    """One test module's source, with its test names, classes and the places a test can go."""

    def __init__(self, path: Path):
        self.path = path
        self.lines = path.read_text().splitlines(keepends=True)
        self.tree = ast.parse("".join(self.lines))
        self.names = {n.name for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                             ast.ClassDef))}
        self.classes = {c.name: c for c in self.tree.body if isinstance(c, ast.ClassDef)
                        and any(_is_test(f) for f in c.body)}
        self.functions = [f for f in self.tree.body if _is_test(f)]
        self.unittest: set[str] = set()  # classes deriving from unittest.TestCase (here or one base up)
        for c in self.tree.body:
            if isinstance(c, ast.ClassDef) and any("TestCase" in ast.unparse(b) or ast.unparse(b) in self.unittest
                                                   for b in c.bases):
                self.unittest.add(c.name)
        words = [w for n in self.names if n.startswith("test") for w in _WORD.findall(n.lower())]
        self.vocab = sorted(set(words) - {"test"}) or ["case", "value", "check"]
        self.inserts: list[tuple[int, bool, str]] = []  # (after line, inside a class, text)
        self.renames: list[tuple[int, str, str]] = []  # (def line, old, new)

    def fresh_name(self, rng) -> str:
        for _ in range(1000):
            name = "test_" + "_".join(rng.sample(self.vocab, min(len(self.vocab), rng.randint(2, 4))))
            if name not in self.names:
                self.names.add(name)
                return name
        raise RuntimeError(f"{self.path.name}: no fresh test name")

    def fresh_fixture(self, rng) -> str:
        """A fixture name that neither the module nor pytest defines."""
        for _ in range(1000):
            name = "_".join(rng.sample(self.vocab, min(2, len(self.vocab))))
            if name not in self.names and name not in _PYTEST_FIXTURES and not name[0].isdigit():
                self.names.add(name)
                return name
        raise RuntimeError(f"{self.path.name}: no fresh fixture name")

    def find(self, cls: str | None, name: str):
        body = self.classes[cls].body if cls else self.tree.body
        return next(f for f in body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == name)

    def write(self) -> None:
        lines = list(self.lines)
        for lineno, old, new in self.renames:
            lines[lineno - 1] = re.sub(rf"\bdef {re.escape(old)}\(", f"def {new}(", lines[lineno - 1], count=1)
        for _, old, new in self.renames:  # a hidden test that calls another (self.test_x(exc_info=True)) follows it
            lines = [re.sub(rf"\bself\.{re.escape(old)}\(", f"self.{new}(", line) for line in lines]
        # bottom up; at one line a class's new methods go in last, so they land before a new
        # top-level function (a class ending there must not lose them to it)
        for after, _, text in sorted(self.inserts, key=lambda i: (-i[0], i[1])):
            lines[after:after] = [text]
        self.path.write_text("".join(lines))


def _is_test(node) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")


def _canary_body(kind: str, rng, indent: str, method: bool, unittest: bool, module: _Module) -> tuple[str, str]:
    """(signature arguments, body) of a canary that must fail ("assert", "raise") or error ("fixture")."""
    values = rng.sample(range(1, 99), 3)
    var = rng.choice(["data", "row", "result", "values", "expected"])
    args = "self" if method else ""
    if kind == "fixture":  # the fixture does not exist: pytest reports an error at setup
        args = ", ".join(filter(None, [args, module.fresh_fixture(rng)]))
        return args, f"{indent}    {var} = {values!r}\n{indent}    assert {var}\n"
    if kind == "raise":
        return args, f"{indent}    {var} = {values!r}\n{indent}    {var}[{len(values) + rng.randint(0, 5)}]\n"
    wrong = sorted(values, reverse=True)  # three distinct values: never their sorted order
    check = (f"self.assertEqual(sorted({var}), {wrong!r})" if unittest and rng.random() < 0.5
             else f"assert sorted({var}) == {wrong!r}")
    return args, f"{indent}    {var} = {values!r}\n{indent}    {check}\n"


def plan_grading(tree: Path, hidden: list[str], others: list[str], n_canaries: int = 4) -> GradingPlan:
    """Rename the hidden tests and plant canaries in `tree`; the runner and its job go in a fresh folder."""
    rng = secrets.SystemRandom()
    modules: dict[str, _Module] = {}

    def module(rel: str) -> _Module:
        if rel not in modules:
            modules[rel] = _Module(tree / rel)
        return modules[rel]

    renamed: dict[str, str] = {}
    for node in hidden:
        rel, *parts = node.split("::")
        cls, name = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
        mod = module(rel)
        new = mod.fresh_name(rng)
        mod.renames.append((mod.find(cls, name).lineno, name, new))
        renamed[node] = "::".join([rel, *([cls] if cls else []), new])
    canaries: dict[str, str] = {}
    homes = sorted({i.split("::")[0] for i in hidden})
    kinds = ["assert", "raise", "fixture"] + [rng.choice(["assert", "raise", "fixture"])
                                               for _ in range(max(0, n_canaries - 3))]
    for kind in kinds:
        rel = rng.choice(homes)
        mod = module(rel)
        spots = [(c, f) for c, node in mod.classes.items() for f in node.body if _is_test(f)]
        spots += [(None, f) for f in mod.functions]
        if kind == "fixture":  # a missing fixture errors only for pytest-style tests: between top-level ones
            cls, beside = None, rng.choice([n for n in mod.tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))])
        else:
            cls, beside = rng.choice(spots)
        name = mod.fresh_name(rng)
        indent = " " * beside.col_offset if cls else ""
        args, body = _canary_body(kind, rng, indent, cls is not None, cls in mod.unittest, mod)
        mod.inserts.append((beside.end_lineno, cls is not None,
                            f"\n{indent}def {name}({args}):\n{body}" + ("" if cls else "\n")))
        canaries["::".join([rel, *([cls] if cls else []), name])] = "E" if kind == "fixture" else "F"
    for mod in modules.values():
        mod.write()
    folder = f".grade-{secrets.token_hex(6)}"
    run_ids = sorted(set(others) | set(renamed.values()) | set(canaries))
    return GradingPlan(folder, secrets.token_hex(32), run_ids, renamed, canaries)


def write_job(plan: GradingPlan, tree: Path, import_root: str, ini: str) -> None:
    """The runner and its job in the plan's folder of `tree` (before the tree goes into a sandbox)."""
    folder = tree / plan.folder
    folder.mkdir()
    shutil.copyfile(RUNNER, folder / "runner.py")
    test_files = sorted({i.split("::")[0] for i in plan.run_ids})
    job = {"key": plan.key, "ids": plan.run_ids, "ini": ini, "import_root": import_root, "test_files": test_files}
    (folder / "job.json").write_text(json.dumps(job))


def lock_tests(workspace: Path, test_root: str = "tests") -> None:
    """Test files owned by root and read-only, when clbench runs as root (sandbox commands run as
    another uid). Without root the runner's hashes of the test files still detect edits."""
    if os.geteuid() != 0:
        return
    top = workspace / test_root
    for path in [top, *top.rglob("*")]:
        if not path.is_symlink():
            os.lchown(path, 0, 0)
            path.chmod(0o555 if path.is_dir() else 0o444)


def read_verdict(plan: GradingPlan, stdout: str, killed: bool) -> Verdict:
    """The runner's signed verdict from the run's stdout; anything else there that claims to be one is forged."""
    tampering: list[str] = []
    payload = None
    for line in stdout.splitlines():
        if not line.startswith(TAG):
            continue
        parts = line.split(" ", 2)
        good = len(parts) == 3 and hmac.compare_digest(
            parts[1], hmac.new(bytes.fromhex(plan.key), parts[2].encode(), hashlib.sha256).hexdigest())
        if not good:
            tampering.append("a verdict line not signed by the grader was printed")
        elif payload is not None:
            tampering.append("more than one signed verdict")
        else:
            payload = json.loads(parts[2])
    if payload is None:
        if not killed:
            tampering.append("the test process ended without the grader's verdict (it exited early)")
        return Verdict({i: "FAILED" for i in plan.run_ids}, tampering)
    codes = payload["outcomes"]
    outcomes = {i: codes[k] if k < len(codes) else "M" for k, i in enumerate(plan.run_ids)}
    tampering += payload["problems"]
    ran = {i.split("::")[0] for i, c in outcomes.items() if c in "PFE" and i not in plan.canaries}
    for node, expected in plan.canaries.items():
        got = outcomes[node]
        if got != expected and (got != "M" or node.split("::")[0] in ran):
            tampering.append(f"a canary test that must {'fail' if expected == 'F' else 'error'} was reported "
                             f"{ {'P': 'passing', 'F': 'failing', 'E': 'erroring', 'S': 'skipped'}.get(got, 'missing')}")
    names = {"P": "PASSED", "F": "FAILED", "E": "ERROR", "S": "SKIPPED", "M": "MISSING"}
    return Verdict({i: names.get(c, "MISSING") for i, c in outcomes.items()}, tampering)


def pytest_ini(options: dict | None) -> str:
    """The grader's own ini: the repository's relevant [pytest] options, nothing from the checkout."""
    lines = ["[pytest]"]
    for name, value in (options or {}).items():
        lines.append(f"{name} = {value}")
    return "\n".join(lines) + "\n"
