"""Scripted agents of CodeRepair-v6: the oracle (reads the true fix) and the honest reference engineer."""
from __future__ import annotations

import ast
import builtins
import keyword
import re
from pathlib import Path

from clbench.agent import Agent
from clbench.agents.coderepair_search import KINDS as EDIT_KINDS  # in the order a newcomer tries them
from clbench.envs.coderepair.house import CANDIDATES, DRAWN
from clbench.envs.coderepair.patching import parse_diff, shell_command

_BACKTICK = re.compile(r"`([^`\n]+)`")
_CALL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: the env's rules follow the report in the first observation
REPORT_END = "Fix the issue in the repository's source code"
_STOP = set(dir(builtins)) | set(keyword.kwlist) | {
    "self", "import", "tablib", "tenacity", "data", "print", "expected", "None", "True", "False", "load_workbook",
    "openpyxl", "logging", "getLogger", "basicConfig", "uuid4", "uuid", "time", "sleep", "append", "extend",
    "lambda", "close", "read", "write", "value", "values", "state", "call", "retrying", "fetch", "poll",
}


def issue_names(text: str, limit: int = 6) -> list[str]:
    """Identifiers an engineer would grep for: code spans and called names in the report."""
    found: list[str] = []
    for span in _BACKTICK.findall(text):
        found += _IDENT.findall(span)
    for block in re.findall(r"```python\n(.*?)```", text, re.DOTALL):
        found += _CALL.findall(block)
        found += re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)", block)
    names = [n for n in dict.fromkeys(found) if len(n) >= 4 and n not in _STOP and not n.startswith("__")]
    return names[:limit]


#: a report line `print(EXPR)  # ACTUAL -- expected LITERAL`: the stated expectation becomes a check
_EXPECT_LINE = re.compile(r"^(\s*)print\((.*)\)\s*#.*?--\s*expected\s+(.+?)\s*$")
#: "expected RetryError ..." / "expected: the NameError propagates": the exception the report expects
_EXPECT_EXC = re.compile(r"expected[^.\n]*?\b([A-Z][A-Za-z]*(?:Error|Exception))\b")
_FRAME = re.compile(r'File "([^"]+)", line \d+, in (\w+)')
_CHECK_PRELUDE = """import ast as _ast, sys as _sys, traceback as _tb
_failed = []
def _expect(value, expected):
    want = _ast.literal_eval(expected)
    if not (value == want or str(value) == str(want)):
        _failed.append(f"got {value!r}, expected {expected}")
def _outcome(exc, expected_type):
    if exc is not None and type(exc).__name__ != expected_type:
        _tb.print_exception(exc)
        _failed.append(f"raised {type(exc).__name__}")
    if exc is None and expected_type:
        _failed.append(f"did not raise {expected_type}")
    print("CHECK FAILED: " + "; ".join(_failed) if _failed else "CHECK PASSED")
    _sys.exit(1 if _failed else 0)
"""
SEARCH_SCRIPT = (Path(__file__).with_name("coderepair_search.py")).read_text()


def check_script(report: str) -> str | None:
    """The report's reproduction as a script that exits 0 only when the report's expectations hold:
    printed values it states (`-- expected X`), the exception it expects, else no exception."""
    block = re.search(r"```python\n(.*?)```", report, re.DOTALL)
    if block is None:
        return None
    lines = []
    for line in block.group(1).splitlines():
        m = _EXPECT_LINE.match(line)
        try:
            literal = m is not None and ast.literal_eval(m.group(3)) is not Ellipsis
        except (ValueError, SyntaxError):
            literal = False
        lines.append(f"{m.group(1)}_expect({m.group(2)}, {m.group(3)!r})" if literal else line)
    exc = _EXPECT_EXC.search(report)
    expected = repr(exc.group(1) if exc else None)
    body = "\n".join("    " + line for line in lines)
    return (f"{_CHECK_PRELUDE}try:\n{body}\nexcept BaseException as exc:\n    _outcome(exc, {expected})\n"
            f"else:\n    _outcome(None, {expected})\n")


#: a failing test in the grading feedback: "  path/to/test_x.py::Class::test: FAILED"
_FAILING = re.compile(r"^\s+(\S+?\.py)::\S+: (?:FAILED|ERROR|MISSING|SKIPPED)$", re.MULTILINE)


def stale_tests(test_command: str, feedback: str) -> bool:
    """Whether the grading feedback names failing tests outside the folder `test_command` runs:
    evidence that the repository's tests moved and the command no longer covers them."""
    folder = test_command.split()[-1].strip("/") + "/"
    return any(not path.startswith(folder) for path in _FAILING.findall(feedback))


def fix_command(latent: dict, instance_id: str) -> str:
    return shell_command(latent["issues"][instance_id]["fix_diff"])


_NOT_MET = re.compile(r"^\s+([a-z-]+): not met", re.MULTILINE)
_TRACKER = re.compile(r"^Tracker: #(\d+)$", re.MULTILINE)


def write_file(path: str, content: str) -> str:
    """A bash command that writes `content` to `path` (relative to the checkout), folders made."""
    folder = str(Path(path).parent)
    return f"mkdir -p {folder} && cat > {path} <<'CLBENCH_FILE_EOF'\n{content}CLBENCH_FILE_EOF"


def check_test(name: str, check: str | None) -> str:
    """A regression test running the report's check in a child Python (fails when the check fails);
    without a check, a placeholder that tests nothing."""
    if check is None:
        return f"def {name}():\n    pass\n"
    return (f"import subprocess\nimport sys\n\nCHECK = {check!r}\n\n\ndef {name}():\n"
            f"    done = subprocess.run([sys.executable, '-c', CHECK], cwd='/tmp', capture_output=True, timeout=30)\n"
            f"    assert done.returncode == 0, done.stdout[-2000:]\n")


def source_test(name: str, fix_diff: str, source_root: str) -> str:
    """The oracle's regression test: the fixed code's hunks are in the source (privileged: the true fix)."""
    blocks = [(fp.path, "".join(h.new)) for fp in parse_diff(fix_diff) for h in fp.hunks]
    return (f"from pathlib import Path\n\nBLOCKS = {blocks!r}\n\n\ndef {name}():\n"
            f"    root = next(p for p in Path(__file__).resolve().parents if (p / {source_root!r}).is_dir())\n"
            f"    for path, block in BLOCKS:\n        assert block in (root / path).read_text()\n")


def house_files(tracker: int, tests_folder: str, guess: dict, test_source) -> str:
    """Bash commands writing the changelog fragment and the regression test the way `guess` (convention ->
    candidate index) says; `test_source(name)` gives the test module."""
    def value(name):
        return CANDIDATES[name][guess[name] % len(CANDIDATES[name])].format(n=tracker)

    fragment = f"{value('fragment-folder')}/{tracker}.{value('fragment-type')}"
    test = f"{tests_folder.strip('/')}/{value('test-location')}"
    note = f"Fix the bug reported in #{tracker}.\n"
    return f"{write_file(fragment, note)}\n{write_file(test, test_source(value('test-name')))}"


class CodeRepairOracle(Agent):
    """Applies the reference fix and submits in the same command: one step, reward 1.0. It reads the
    true fix (privileged): it measures r_max, not learnability."""

    name = "oracle"
    deterministic = True  # plays from its observations only: one stateless pass measures it
    privileged = True

    def act(self, observation: str, info: dict) -> str:
        issue = self.latent["issues"][info["instance_id"]]
        test = source_test(issue["test_name"], issue["fix_diff"], issue["source_root"])
        fragment = write_file(issue["fragment_path"], f"Fix the bug reported in #{issue['tracker']}.\n")
        return (f"{fix_command(self.latent, info['instance_id'])}\n{fragment}\n"
                f"{write_file(issue['test_path'], test)}\necho {self.latent['submit_marker']}")


class CodeRepairReference(Agent):
    """An honest scripted engineer: it sees only what any agent sees (the report, command output,
    the files in the sandbox, the grading feedback). Per issue, on a project it does not know yet, it
    maps the source folder, finds the test files (`find`: the folder holding most of them) and runs
    that folder's tests once on the untouched checkout (kept as its test command if they pass);
    then it turns the report's reproduction and stated expectations into a check script and runs
    it, and runs a search (coderepair_search.py, sent into the sandbox) over a catalog of common
    regression edits (flipped comparisons, off-by-one, swapped statements, a constant for a local
    name, a swapped or missing attribute, a dropped keyword argument, a removed negation, swapped
    arguments) in the functions the traceback and the report point at, keeping an edit only if
    the check and its test command pass, and submits. At most `search_steps` search commands of
    `search_edits` edits each.

    It cannot fix what its catalog does not hold or what the report states no checkable
    expectation for: it submits without a fix when the check passes on the buggy code, or when
    the search finds nothing. Measured on the default schedule it resolves only a few issues (see
    the spec card); its low stateless score leaves room to learn.

    Stateful (one agent across issues) it keeps knowledge per project (the package name, e.g.
    "tenacity", so it carries from one release to the next): that the layout is mapped, the test
    command that passed (the three exploration steps are skipped), which edit kinds fixed earlier
    issues (tried first, most fixes first) and which only passed its check but failed the grading
    (tried last). It trusts that knowledge: a remembered test command is not re-run on the
    untouched checkout before use. When a new release moves the tests (tenacity 7.0.0 ships them
    in tenacity/tests/, 8.x in tests/), the remembered command tests nothing, and the reference
    learns that only from evidence:
    - inside an issue, when its search reports that for an edit that passed the check the test
      command tested nothing (pytest exit 4 or 5): it forgets the command, finds the tests again
      and resumes the search at that edit (three steps more than with fresh knowledge);
    - at the end of an issue, when the grading feedback names failing tests in a folder its
      command does not run (the only evidence when no edit passed the check).
    Until then it keeps trusting the command.

    `freeze_at=K` (for `clbench drift-check`): from position K on it revises nothing it knows
    (test command, layout, edit-kind tallies), neither within an issue nor between issues: it
    ignores both kinds of evidence, and every issue starts from the knowledge held at K. Frozen
    before tenacity 8.2.3 it keeps running 7.0.0's test folder there, so its search confirms no
    edit and it fixes nothing. The drift cost measured is thus the cost of not revising learned
    knowledge when the evidence says it is stale; a reference that re-derived its test command
    whenever it broke, frozen or not, would lose only those three steps per issue.
    """

    name = "reference"
    deterministic = True  # plays from its observations only: one stateless pass measures it

    def __init__(self, card, seed: int = 0, latent=None, freeze_at: int | None = None, search_steps: int = 4,
                 search_edits: int = 50):
        super().__init__(card, seed=seed, latent=latent)
        self.freeze_at = freeze_at
        self.search_steps = search_steps
        self.search_edits = search_edits
        #: project -> {"layout": bool, "test_command": str, "kinds": {kind: fixes}, "blamed": {kind: wrong fixes}}
        self.memory: dict[str, dict] = {}
        #: the house conventions as it believes them: convention -> index into its list of common choices
        self.house = dict.fromkeys(DRAWN, 0)
        self._queue: list[str] = []

    # ------------------------------------------------------------------ per issue
    def begin_instance(self, observation: str, info: dict) -> None:
        project = re.search(r"^Repository: .*?\((\S+) ", observation, re.MULTILINE).group(1)
        root = re.search(r"source code \(([^)]*?)/;", observation).group(1)
        report = observation.split(REPORT_END)[0]
        self._repo, self._root = project, root
        self._frozen = self.frozen(info)
        known = self.memory.get(project, {})
        self._learned = {"layout": known.get("layout", False), "test_command": known.get("test_command", ""),
                         "kinds": dict(known.get("kinds", {})), "blamed": dict(known.get("blamed", {}))}
        self._tests = self._learned["test_command"]  # what the search runs in this issue ("" = no tests)
        self._candidate = ""
        self._names = issue_names(report)
        self._check = check_script(report)
        self._start, self._searches, self._fix_kind, self._frames = 0, 0, None, []
        self._marker = re.search(r"`echo ([A-Z_]+)`", observation).group(1)
        self._tracker = int(_TRACKER.search(observation).group(1))
        self._queue = []
        if not self._learned["layout"]:
            self._queue.append("layout")
        if not self._learned["test_command"]:
            self._queue += ["tests", "baseline"]
        self._queue.append("check" if self._check else "submit")
        self._phase = None

    def act(self, observation: str, info: dict) -> str:
        if self._phase is not None:
            self._read(self._phase, observation)
        if not self._queue:
            self._queue.append("submit")
        self._phase = self._queue.pop(0)
        return self._command(self._phase)

    def _command(self, phase: str) -> str:
        if phase == "layout":
            return f"ls; find {self._root} -name '*.py' | sort | head -60"
        if phase == "tests":
            return ("find . -path ./.git -prune -o -name 'test_*.py' -print | sort | head -60; "
                    "grep -n -A3 -E '^\\[(tool:)?pytest\\]' pytest.ini setup.cfg tox.ini 2>/dev/null")
        if phase == "baseline":
            if not self._candidate:
                return "echo no test files found"
            # the summary without its duration, so the same checkout always prints the same
            return (f"{self._candidate} 2>&1 | tail -1 | sed -E 's/ in [0-9.]+s.*//'; "
                    "echo TESTS-EXIT=${PIPESTATUS[0]}")
        if phase == "check":
            return (f"cat > /tmp/check.py <<'CLBENCH_CHECK'\n{self._check}CLBENCH_CHECK\n"
                    f"cat > /tmp/search.py <<'CLBENCH_SEARCH'\n{SEARCH_SCRIPT}CLBENCH_SEARCH\n"
                    "cd /tmp && timeout 10 python /tmp/check.py 2>&1 | tail -40")
        if phase == "search":
            self._searches += 1
            tests = f"cd /testbed && {self._tests} > /dev/null 2>&1" if self._tests else ""
            return (f"cd /tmp && python /tmp/search.py /tmp/check.py /testbed/{self._root} {self._start} "
                    f"{self.search_edits} {','.join(self._kind_order())} '{','.join(self._names)}' "
                    f"'{','.join(self._frames)}' '{tests}'")
        tests = self._tests or self._candidate
        folder = tests.split()[-1] if tests else "tests"
        files = house_files(self._tracker, folder, self.house, lambda name: check_test(name, self._check))
        return f"{files}\necho {self._marker}"

    def _read(self, phase: str, obs: str) -> None:
        if phase == "layout":
            self._learned["layout"] = bool(re.search(rf"{re.escape(self._root)}/\S+\.py", obs))
        elif phase == "tests":
            folders = [str(Path(p).parent) for p in re.findall(r"^\./(\S+/test_\w+\.py)$", obs, re.MULTILINE)]
            if folders:  # the folder holding most test files is the suite
                folder = max(dict.fromkeys(folders), key=folders.count)
                self._candidate = f"python -m pytest -q -x -p no:cacheprovider -o addopts= {folder}"
        elif phase == "baseline":
            if "TESTS-EXIT=0" in obs:  # the suite runs and passes on the untouched checkout: a usable guard
                self._tests = self._learned["test_command"] = self._candidate
        elif phase == "check":
            if "CHECK PASSED" not in obs:  # reproduced (or hung): search where the traceback points, innermost first
                frames = [f"{path}:{func}" for path, func in _FRAME.findall(obs) if f"/{self._root}/" in path]
                self._frames = list(dict.fromkeys(reversed(frames)))
                self._queue.append("search")
            # CHECK PASSED: the report's expectations already hold, nothing to verify a fix against
        elif phase == "search":
            fixed = re.search(r"^FIXED \d+ (\w+) ", obs, re.MULTILINE)
            more = re.search(r"^NEXT (\d+)", obs, re.MULTILINE)
            unusable = re.search(r"^TESTS-UNUSABLE \d+ (\d+)", obs, re.MULTILINE)
            if unusable and not fixed and not self._frozen:
                # evidence that its test command is stale: find the tests again, resume at the edit it rejected
                self._tests = self._learned["test_command"] = ""
                self._start = int(unusable.group(1))
                self._queue += ["tests", "baseline", "search"]
            elif fixed:
                self._fix_kind = fixed.group(1)
            elif more and self._searches < self.search_steps:
                self._start = int(more.group(1))
                self._queue.append("search")

    def _kind_order(self) -> list[str]:
        """Kinds that fixed issues first (most fixes first), then untried ones, then those that only fooled it."""
        wins, blamed = self._learned["kinds"], self._learned["blamed"]
        return sorted(EDIT_KINDS, key=lambda k: (-wins.get(k, 0), bool(blamed.get(k)) and not wins.get(k),
                                                 EDIT_KINDS.index(k)))

    def end_instance(self, reward: float, info: dict, observation: str | None = None) -> None:
        if self._frozen:
            return
        if self._fix_kind is not None:  # credit the edit kind that fixed it, or blame the one that fooled the check
            tally = self._learned["kinds" if reward > 0 else "blamed"]
            tally[self._fix_kind] = tally.get(self._fix_kind, 0) + 1
        stale = bool(self._learned["test_command"]) and stale_tests(self._learned["test_command"], observation or "")
        if stale:
            self._learned["test_command"] = ""  # the tests live elsewhere now: find them again next time
        self.memory[self._repo] = self._learned
        for name in _NOT_MET.findall(observation or ""):
            if name in self.house and not (stale and name == "test-location"):  # a wrong guess: try the next one
                self.house[name] = (self.house[name] + 1) % len(CANDIDATES[name])

    # ------------------------------------------------------------------ resumable state
    def state_dict(self) -> dict:
        return {"memory": self.memory, "house": self.house}

    def load_state_dict(self, state: dict) -> None:
        self.memory = {k: {**v, "kinds": dict(v.get("kinds", {})), "blamed": dict(v.get("blamed", {}))}
                       for k, v in state["memory"].items()}
        self.house = dict(state.get("house", dict.fromkeys(DRAWN, 0)))
