"""Scripted agents of CodeRepair-v1: the oracle (reads the true fix) and the honest reference engineer."""
from __future__ import annotations

import ast
import builtins
import keyword
import re
from pathlib import Path

from clbench.agent import Agent
from clbench.agents.coderepair_search import KINDS as EDIT_KINDS  # in the order a newcomer tries them
from clbench.envs.coderepair.patching import shell_command

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


def fix_command(latent: dict, instance_id: str) -> str:
    return shell_command(latent["issues"][instance_id]["fix_diff"])


class CodeRepairOracle(Agent):
    """Applies the reference fix and submits in the same command: one step, reward 1.0. It reads the
    true fix (privileged): it measures r_max, not learnability."""

    name = "oracle"
    deterministic = True  # plays from its observations only: one stateless pass measures it
    privileged = True

    def act(self, observation: str, info: dict) -> str:
        return f"{fix_command(self.latent, info['instance_id'])}\necho {self.latent['submit_marker']}"


class CodeRepairReference(Agent):
    """An honest scripted engineer: it sees only what any agent sees (the report, command output,
    the files in the sandbox). Per issue it maps the repository and finds its test command, turns
    the report's reproduction and stated expectations into a check script and runs it, then runs a
    search (coderepair_search.py, sent into the sandbox) over a catalog of common regression
    edits (flipped comparisons, off-by-one, swapped statements, a constant for a local name, a
    swapped or missing attribute, a dropped keyword argument, a removed negation, swapped
    arguments) in the functions the traceback and the report point at, keeping an edit only if
    the check and the visible tests pass, and submits. At most `search_steps` search commands of
`search_edits` edits each.

    It cannot fix what its catalog does not hold or what the report states no checkable
    expectation for: it submits without a fix when the check passes on the buggy code, or when
    the search finds nothing. Measured on the default schedule it resolves only a few issues (see
    the spec card); its low stateless score leaves room to learn.

    Stateful (one agent across issues) it remembers, per repository, the layout and test command
    (two exploration steps fewer) and which edit kinds fixed earlier issues (tried first, so the
    search needs fewer commands), and which kinds passed its check but failed the grading (tried
    last). `freeze_at=K`: from position K on it stops updating what it learned.
    """

    name = "reference"
    deterministic = True  # plays from its observations only: one stateless pass measures it

    def __init__(self, card, seed: int = 0, latent=None, freeze_at: int | None = None, search_steps: int = 4,
                 search_edits: int = 50):
        super().__init__(card, seed=seed, latent=latent)
        self.freeze_at = freeze_at
        self.search_steps = search_steps
        self.search_edits = search_edits
        #: repo -> {"layout": bool, "test_command": str, "kinds": {kind: score}}
        self.memory: dict[str, dict] = {}
        self._queue: list[str] = []

    # ------------------------------------------------------------------ per issue
    def begin_instance(self, observation: str, info: dict) -> None:
        repo = re.search(r"^Repository: .*?\((\S+) ", observation, re.MULTILINE).group(1)
        root = re.search(r"source code \(([^)]*?)/;", observation).group(1)
        report = observation.split(REPORT_END)[0]
        self._repo, self._root = repo, root
        self._frozen = self.frozen(info)
        known = self.memory.get(repo, {})
        self._learned = {"layout": known.get("layout", False), "test_command": known.get("test_command", ""),
                         "kinds": dict(known.get("kinds", {}))}
        self._names = issue_names(report)
        self._check = check_script(report)
        self._start, self._searches, self._fix_kind, self._frames = 0, 0, None, []
        self._marker = re.search(r"Submit with `echo (\S+)`", observation).group(1)
        self._queue = []
        if not self._learned["layout"]:
            self._queue.append("layout")
        if not self._learned["test_command"]:
            self._queue.append("tests")
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
            return "ls tests; grep -n -A3 -E '^\\[(tool:)?pytest\\]' pytest.ini setup.cfg tox.ini 2>/dev/null"
        if phase == "check":
            return (f"cat > /tmp/check.py <<'CLBENCH_CHECK'\n{self._check}CLBENCH_CHECK\n"
                    f"cat > /tmp/search.py <<'CLBENCH_SEARCH'\n{SEARCH_SCRIPT}CLBENCH_SEARCH\n"
                    "cd /tmp && timeout 10 python /tmp/check.py 2>&1 | tail -40")
        if phase == "search":
            self._searches += 1
            tests = f"cd /testbed && {self._test_command()} > /dev/null 2>&1"
            return (f"cd /tmp && python /tmp/search.py /tmp/check.py /testbed/{self._root} {self._start} "
                    f"{self.search_edits} {','.join(self._kind_order())} '{','.join(self._names)}' "
                    f"'{','.join(self._frames)}' '{tests}'")
        return f"echo {self._marker}"

    def _read(self, phase: str, obs: str) -> None:
        if phase == "layout":
            self._learned["layout"] = bool(re.search(rf"{re.escape(self._root)}/\S+\.py", obs))
        elif phase == "tests":
            if "test" in obs:  # a tests folder and a pytest section: the suite runs with pytest
                self._learned["test_command"] = "python -m pytest -q -x -p no:cacheprovider -o addopts= tests"
        elif phase == "check":
            if "CHECK PASSED" not in obs:  # reproduced (or hung): search where the traceback points, innermost first
                frames = [f"{path}:{func}" for path, func in _FRAME.findall(obs) if f"/{self._root}/" in path]
                self._frames = list(dict.fromkeys(reversed(frames)))
                self._queue.append("search")
            # CHECK PASSED: the report's expectations already hold, nothing to verify a fix against
        elif phase == "search":
            fixed = re.search(r"^FIXED \d+ (\w+) ", obs, re.MULTILINE)
            more = re.search(r"^NEXT (\d+)", obs, re.MULTILINE)
            if fixed:
                self._fix_kind = fixed.group(1)
            elif more and self._searches < self.search_steps:
                self._start = int(more.group(1))
                self._queue.append("search")

    def _test_command(self) -> str:
        return self._learned["test_command"] or "python -m pytest -q -x tests"

    def _kind_order(self) -> list[str]:
        scores = self._learned["kinds"]
        return sorted(EDIT_KINDS, key=lambda k: (-scores.get(k, 0), EDIT_KINDS.index(k)))

    def end_instance(self, reward: float, info: dict) -> None:
        if self._frozen:
            return
        if self._fix_kind is not None:  # credit the edit kind that fixed it, or blame the one that fooled the check
            kinds = self._learned["kinds"]
            kinds[self._fix_kind] = kinds.get(self._fix_kind, 0) + (1 if reward > 0 else -1)
        self.memory[self._repo] = self._learned

    # ------------------------------------------------------------------ resumable state
    def state_dict(self) -> dict:
        return {"memory": self.memory}

    def load_state_dict(self, state: dict) -> None:
        self.memory = {k: {**v, "kinds": dict(v.get("kinds", {}))} for k, v in state["memory"].items()}
