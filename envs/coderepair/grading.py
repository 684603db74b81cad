"""Grading that no code in the sandbox can decide: records compared outside it.

Threat model. Everything that runs in the evaluation sandbox is under the submission's control:
the package's `__init__.py` runs before any test, can patch pytest, the runner and the recorder,
print anything, write any file the sandbox can write, or end the process (os._exit). So no
process that imports or runs repository code holds an expected value or computes the verdict:
- the test modules of the run are rewritten on the host (instrument.py) so that each check
  records what it looks at (the values compared, whether a comparison holds, the exception a
  block raised, the warnings it issued, the calls a mock saw) instead of deciding; literal
  expected values and the checks' polarity are dropped from the rewritten code; the hidden
  FAIL_TO_PASS tests get fresh names each grading (`secrets`), drawn from the words of the
  module's own test names;
- every test starts on the same wall clock (the checkout's date, ticking from there), so a value
  made from today's date (a file header, a default timestamp) is the same in the fixed tree's
  cached records and in a submission's run on any later day;
- the sandbox's runner (grade_runner.py) writes the records and each test's status to a file;
  the grader (this module, in the env's process, which never imports the repository) reads it as
  untrusted data and compares it with the records of the fixed tree (the release with the true
  fix), made the same way in two separate runs of the trusted tree and kept where both runs agree
  (`expected_records`, cached on the host outside any sandbox);
- a test passes when it ended normally and every stable record of the fixed tree was observed
  with the same value (an operand bounded by a literal, `t >= 500`, by the bound's outcome:
  bounds.py; a traceback in a text by its presence), with no observation the fixed tree never made. A record file that is not
  what the runner writes (not JSON of the runner's shape, too large, a link) is tampering.
Forging a pass therefore needs the values the fixed code produces: forged reports, patched
runner or recorder internals, early exits, verdict lines printed on stdout, recognizing tests by
name all yield no matching records (tests/test_coderepair.py plays each; they score 0).
Residual risk, stated: a check whose expected side the test computes at run time (not a literal)
is present in the sandbox; code that identifies the hidden tests (e.g. against a saved copy of
the visible ones) and guesses that each such comparison holds could forge those records. Every
issue's hidden tests include records with a dropped literal or a negated check that its bug
changes (tests/test_coderepair.py checks it), which such guessing does not produce.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shlex
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from clbench.envs.coderepair.bounds import bounds as module_bounds
from clbench.envs.coderepair.bounds import holds
from clbench.envs.coderepair.checkout import CHECKOUT_TIME
from clbench.envs.coderepair.instrument import RECORDER_MODULE, instrument

HERE = Path(__file__).parent
#: the runner and the recorder copied into each grading folder; read as files, never imported here
RUNNER = HERE / "grade_runner.py"
RECORDER = HERE / "recorder.py"
#: bump when the rewriting or the records change: cached expected records are keyed by it
#: (2: every test starts on the same pinned wall clock; 3: bounded operands stable by their outcome)
RECORD_FORMAT = 3
#: largest record file read back (bytes); larger is tampering
MAX_RECORDING = 32 << 20
_WORD = re.compile(r"[a-z0-9]+")


class Tampering(Exception):
    """The record file is not what the runner writes."""


@dataclass
class GradingPlan:
    """What one grading runs: the test ids (hidden tests under their fresh names) and where."""

    folder: str
    run_ids: list[str]
    hidden: dict[str, str]  # original FAIL_TO_PASS id -> the id it runs under

    def command(self, workdir: str) -> str:
        """The test runtime's python (read-only, never the workspace's), isolated mode, in the checkout
        (unsafe-local names its host folder $WORKSPACE)."""
        return (f'cd "${{WORKSPACE:-{workdir}}}" && "$VIRTUAL_ENV/bin/python" -I -B '
                f"{shlex.quote(self.folder)}/runner.py")

    @property
    def original(self) -> dict[str, str]:
        return {v: k for k, v in self.hidden.items()}


def _fresh_name(names: set[str], rng) -> str:
    words = sorted({w for n in names if n.startswith("test") for w in _WORD.findall(n.lower())} - {"test"})
    words = words or ["case", "value", "check"]
    for _ in range(1000):
        name = "test_" + "_".join(rng.sample(words, min(len(words), rng.randint(2, 4))))
        if name not in names:
            names.add(name)
            return name
    raise RuntimeError("no fresh test name")


def plan_grading(tree: Path, hidden: list[str], others: list[str], rename: bool = True) -> GradingPlan:
    """Rewrite the run's test modules in `tree` (hidden tests renamed afresh when `rename`)."""
    import ast

    rng = secrets.SystemRandom()
    by_file: dict[str, dict] = {}
    renamed: dict[str, str] = {}
    for node in sorted(set(hidden) | set(others)):
        by_file.setdefault(node.split("::")[0], {})
    for rel, renames in by_file.items():
        source = (tree / rel).read_text()
        names = {n.name for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.FunctionDef,
                                                                               ast.AsyncFunctionDef, ast.ClassDef))}
        for node in hidden:
            path, *parts = node.split("::")
            if path != rel:
                continue
            cls, name = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
            new = _fresh_name(names, rng) if rename else name
            renames[(cls, name)] = new
            renamed[node] = "::".join([rel, *([cls] if cls else []), new])
        (tree / rel).write_text(instrument(source, renames)[0])
    folder = f".grade-{secrets.token_hex(6)}"
    (tree / folder).mkdir()
    shutil.copyfile(RUNNER, tree / folder / "runner.py")
    shutil.copyfile(RECORDER, tree / folder / f"{RECORDER_MODULE}.py")
    run_ids = sorted(set(others) | set(renamed.values()))
    return GradingPlan(folder, run_ids, renamed)


def test_seed(test_id: str) -> int:
    """The `random` seed of a test in every run (by its original id, whatever name it runs under)."""
    return int.from_bytes(hashlib.sha256(test_id.encode()).digest()[:4], "big")


def bounds_of_tests(tree: Path, ids: list[str]) -> dict[str, dict]:
    """Each test file's bounded order comparisons (read before the rewriting)."""
    return {rel: module_bounds((tree / rel).read_text()) for rel in sorted({i.split("::")[0] for i in ids})}


def write_job(plan: GradingPlan, tree: Path, import_root: str, ini: str) -> None:
    original = plan.original
    seeds = {i: test_seed(original.get(i, i)) for i in plan.run_ids}
    job = {"ids": plan.run_ids, "ini": ini, "import_root": import_root, "seeds": seeds, "clock": CHECKOUT_TIME}
    (tree / plan.folder / "job.json").write_text(json.dumps(job))


def lock_tests(workspace: Path, test_root: str = "tests") -> None:
    """Test files owned by root and read-only, when clbench runs as root (sandbox commands run as
    another uid). Not a defence of the verdict (the records are), only of the test code's meaning."""
    if os.geteuid() != 0:
        return
    top = workspace / test_root
    for path in [top, *top.rglob("*")]:
        if not path.is_symlink():
            os.lchown(path, 0, 0)
            path.chmod(0o555 if path.is_dir() else 0o444)


def read_recording(workspace: Path, plan: GradingPlan) -> dict[str, dict[str, dict]]:
    """The run's records as untrusted data: original test id -> {bucket: {"status", "records"}}, where a
    bucket is "" or a parametrization suffix ("[...]"). Missing file: nothing ran to the end (empty).
    Raises Tampering when the file is not what the runner writes."""
    path = workspace / plan.folder / "recording.json"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {}
    if workspace.resolve() not in path.resolve().parents:  # a folder swapped for a link out of the workspace
        raise Tampering()
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_RECORDING:
        raise Tampering()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(MAX_RECORDING + 1)
    try:
        data = json.loads(raw)
        tests = data["tests"]
        if not isinstance(tests, dict):
            raise TypeError
        original = plan.original
        out: dict[str, dict[str, dict]] = {}
        for nodeid, entry in tests.items():
            status, records = entry["status"], entry["records"]
            if not isinstance(status, str) or not isinstance(records, list):
                raise TypeError
            base, _, params = nodeid.partition("[")
            test = original.get(base, base)
            keyed: dict[str, str] = {}
            seen: dict[str, int] = {}
            for key, value in records:
                if not isinstance(key, str):
                    raise TypeError
                seen[key] = seen.get(key, 0) + 1
                keyed[f"{key}#{seen[key]}"] = json.dumps(value, sort_keys=True)
            bucket = f"[{params}" if params else ""
            if bucket in out.setdefault(test, {}):
                raise TypeError
            out[test][bucket] = {"status": status, "records": keyed}
    except (ValueError, TypeError, KeyError, AttributeError):
        raise Tampering() from None
    return out


def stable_records(first: dict, second: dict, bounds: dict[str, dict] | None = None) -> dict[str, dict[str, dict]]:
    """What two runs of the fixed tree agree on, per test and bucket: the status, the records that agree
    ("stable": equal values, or for an operand compared with a literal bound, the same outcome, as the
    judge compares them; a measurement rarely repeats its exact value) and every record key either run
    made ("known"). `bounds`: test file -> its bounded order comparisons (bounds.py)."""
    out: dict[str, dict[str, dict]] = {}
    for test in set(first) & set(second):
        file_bounds = (bounds or {}).get(test.split("::")[0])
        for bucket in set(first[test]) & set(second[test]):
            a, b = first[test][bucket], second[test][bucket]
            if a["status"] != b["status"]:
                continue
            stable = {k: v for k, v in a["records"].items() if k in b["records"]
                      and agree(k, v, b["records"][k], file_bounds)}
            out.setdefault(test, {})[bucket] = {"status": a["status"], "stable": stable,
                                                "known": sorted(set(a["records"]) | set(b["records"]))}
    return out


#: a traceback inside a recorded text (a log record with exc_info): its file lines and source lines
#: depend on where the fix put its code, not on what the code does; compared up to its start
_TRACEBACK = re.compile(r'Traceback \(most recent call last\):(?:[^"\\]|\\.)*')


def same(a: str | None, b: str | None) -> bool:
    """Whether two recorded values (JSON text) agree, tracebacks in texts compared by their presence."""
    if a == b or a is None or b is None:
        return a == b
    return _TRACEBACK.sub("Traceback", a) == _TRACEBACK.sub("Traceback", b)


def agree(key: str, expected: str | None, got: str | None, bounds: dict | None) -> bool:
    """Whether a record agrees with the fixed tree's: equal values, or for an operand compared with a
    literal bound (bounds.py), the same outcome of that comparison."""
    site, _, part = key.partition(".")
    bound = (bounds or {}).get(int(site)) if site.isdigit() and part.startswith("l") else None
    if bound is not None:
        return holds(bound, expected) == holds(bound, got)
    return same(expected, got)


def judge(expected: dict[str, dict[str, dict]], actual: dict[str, dict[str, dict]], ids: list[str],
          bounds: dict[str, dict] | None = None) -> dict[str, str]:
    """PASSED when a test ran, ended as on the fixed tree and observed what the fixed tree observed;
    FAILED when it ran and something differs; MISSING when it has no records. `bounds`: test file ->
    its bounded order comparisons (bounds.py)."""
    outcomes = {}
    for test in ids:
        want, got = expected.get(test, {}), actual.get(test)
        file_bounds = (bounds or {}).get(test.split("::")[0])
        if not got:
            outcomes[test] = "MISSING"
            continue
        ok = bool(want) and set(want) == set(got)
        for bucket, exp in want.items():
            run = got.get(bucket)
            if not ok or run is None or run["status"] != exp["status"]:
                ok = False
                break
            records = run["records"]
            known = set(exp["known"])
            if (any(not agree(k, v, records.get(k), file_bounds) for k, v in exp["stable"].items())
                    or any(k not in known for k in records)):
                ok = False
                break
        outcomes[test] = "PASSED" if ok else "FAILED"
    return outcomes


def differences(expected: dict, actual: dict, test: str, bounds: dict[str, dict] | None = None) -> list[str]:
    """The stable record keys of `test` whose value differs or is missing in `actual` (diagnostics)."""
    out = []
    file_bounds = (bounds or {}).get(test.split("::")[0])
    for bucket, exp in expected.get(test, {}).items():
        got = actual.get(test, {}).get(bucket, {"records": {}})["records"]
        out += [k for k, v in exp["stable"].items() if not agree(k, v, got.get(k), file_bounds)]
    return out


#: record parts a submission cannot produce without the fixed code's values: an operand compared with a
#: literal the sandbox never saw, an exception type, warning categories, a mock's calls, a text a
#: pattern is matched against
UNGUESSABLE = re.compile(r"^\d+\.(l\d+|x|w|n|a|r)#")


def records_key(issue_id: str, bug_diff: str, fix_diff: str, ids: list[str], runtime: str) -> str:
    """Identifies the fixed tree's records: the issue's data, the rewriting and the runtime."""
    parts = [issue_id, bug_diff, fix_diff, "\n".join(sorted(ids)), runtime, str(RECORD_FORMAT),
             RUNNER.read_text(), RECORDER.read_text(), (HERE / "instrument.py").read_text()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def pytest_ini(options: dict | None) -> str:
    """The grader's own ini: the repository's relevant [pytest] options, nothing from the checkout."""
    lines = ["[pytest]"]
    for name, value in (options or {}).items():
        lines.append(f"{name} = {value}")
    return "\n".join(lines) + "\n"
