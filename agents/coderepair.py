"""Scripted agents of CodeRepair-v0: the oracle and the exploring reference engineer."""
from __future__ import annotations

import builtins
import keyword
import re
from collections import deque

from clbench.agent import Agent
from clbench.envs.coderepair.patching import parse_diff, shell_command

_BACKTICK = re.compile(r"`([^`\n]+)`")
_CALL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GREP_HIT = re.compile(r"^(\S+?\.py):\d+:\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
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


def fix_command(latent: dict, instance_id: str) -> str:
    return shell_command(latent["issues"][instance_id]["fix_diff"])


class CodeRepairOracle(Agent):
    """Applies the reference fix and submits in the same command: one step, reward 1.0."""

    name = "oracle"
    privileged = True

    def act(self, observation: str, info: dict) -> str:
        return f"{fix_command(self.latent, info['instance_id'])}\necho {self.latent['submit_marker']}"


class CodeRepairReference(Agent):
    """A scripted engineer that explores like a newcomer, then applies the known reference fix.

    It measures the EFFICIENCY side of the task only: it always ends with the correct fix (it is
    privileged), so its reward reflects how many steps it spends finding its way. Per issue it
    lists the repository, maps its modules, reads the test configuration and runs the suite
    (learning the test command), greps the package for names from the report, reads the code
    around the fix, applies the fix, reruns the tests and submits: 9 steps. Run stateful it
    keeps a per-repository memory (module map, test command, where each grepped name is
    defined) and skips what it already knows: 4-5 steps on later issues of a repository.
    Stateless (a fresh agent per issue) it cannot, which makes its gain positive.
    """

    name = "reference"
    privileged = True

    def __init__(self, card, seed: int = 0, latent=None):
        super().__init__(card, seed=seed, latent=latent)
        #: repo -> {"modules": [...], "test_command": str, "symbols": {name: file}}
        self.memory: dict[str, dict] = {}
        self._plan: deque = deque()
        self._parse = None

    # ------------------------------------------------------------------ planning
    def begin_instance(self, observation: str, info: dict) -> None:
        issue = self.latent["issues"][info["instance_id"]]
        repo, root = issue["repo"], issue["source_root"]
        known = self.memory.setdefault(repo, {"modules": [], "test_command": "", "symbols": {}})
        plan: list[tuple[str, object]] = []
        if not known["modules"]:
            plan.append(("ls -la", None))
            plan.append((f"find . -name '*.py' -path './{root}/*' | sort", self._learn_modules(repo)))
        if not known["test_command"]:
            plan.append(("cat pytest.ini tox.ini setup.cfg 2>/dev/null | grep -n -i -B2 -A4 'pytest'",
                         self._learn_test_command(repo)))
            plan.append(("python -m pytest -q tests 2>&1 | tail -5", None))
        names = issue_names(observation.split(REPORT_END)[0])
        if names and not any(n in known["symbols"] for n in names):
            alternatives = "|".join(names)
            plan.append((f"grep -rnE '(def|class) ({alternatives})\\b' {root}", self._learn_symbols(repo)))
        first = parse_diff(issue["fix_diff"])[0]
        line = first.hunks[0].old_start
        plan.append((f"nl -ba {first.path} | sed -n '{max(1, line - 15)},{line + 25}p'", None))
        plan.append((fix_command(self.latent, info["instance_id"]), None))
        plan.append((lambda: f"{self._test_command()} 2>&1 | tail -3", None))
        plan.append((f"echo {self.latent['submit_marker']}", None))
        self._repo = repo
        self._plan = deque(plan)
        self._parse = None

    def act(self, observation: str, info: dict) -> str:
        if self._parse is not None:
            self._parse(observation)
        if not self._plan:  # the env ends the issue at submission; this is only a safety net
            return "submit"
        command, self._parse = self._plan.popleft()
        return command() if callable(command) else command

    def _test_command(self) -> str:
        return self.memory[self._repo]["test_command"] or "python -m pytest -q tests"

    # ------------------------------------------------------------------ learning from observations
    def _learn_modules(self, repo):
        def parse(obs: str):
            self.memory[repo]["modules"] = sorted(set(re.findall(r"\./(\S+\.py)", obs)))
        return parse

    def _learn_test_command(self, repo):
        def parse(obs: str):
            # the configs name pytest; run it as a module so the checkout's sys.path setup applies
            if "pytest" in obs.lower():
                self.memory[repo]["test_command"] = "python -m pytest -q tests"
        return parse

    def _learn_symbols(self, repo):
        def parse(obs: str):
            for path, name in _GREP_HIT.findall(obs):
                self.memory[repo]["symbols"].setdefault(name, path)
        return parse

    # ------------------------------------------------------------------ resumable state
    def state_dict(self) -> dict:
        return {"memory": self.memory}

    def load_state_dict(self, state: dict) -> None:
        self.memory = {k: dict(v) for k, v in state["memory"].items()}
