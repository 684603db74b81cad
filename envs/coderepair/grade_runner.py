"""CodeRepair's test runner inside the evaluation sandbox (copied in by the grader, never shown to
the agent). It runs before any repository code: it reads its job (a per-grading key and the test
ids) and deletes it, hashes the test files, starts pytest with plugins, conftest discovery,
ini and bytecode under its own control, and writes one verdict line, signed with the key, to a
descriptor the repository's code never had as its stdout. In the same process as the code under
test nothing is secret from code written against this file; what stops such code is the canary
tests (the grader plants them, this runner does not know which they are) and the integrity
checks below, which flag any change to pytest, pluggy or unittest made while the tests ran.
"""
import hashlib
import hmac
import json
import os
import sys
import tempfile

import pytest  # from the read-only test runtime; imports nothing of the repository

TAG = "CLBENCH-VERDICT"
HERE = os.path.dirname(os.path.abspath(__file__))
#: modules whose functions and classes nothing in a test run may replace
WATCHED = ("_pytest", "pytest", "pluggy", "unittest", "builtins", "os")


def watched_objects() -> dict:
    """(module, attribute[, class attribute]) -> id of every function and class of the watched modules."""
    seen = {}
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] not in WATCHED:
            continue
        for attr, value in list(vars(module).items()):
            if callable(value):
                seen[(name, attr)] = id(value)
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                for member, inner in list(vars(value).items()):
                    if callable(inner) or isinstance(inner, (staticmethod, classmethod, property)):
                        seen[(name, attr, member)] = id(inner)
    return seen


def file_digest(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return "unreadable"


class Grader:
    """The pytest plugin: per-test outcomes plus integrity checks of the test machinery."""

    def __init__(self, ids: list, test_files: list):
        self.ids = ids
        self.phases: dict = {}
        self.problems: list = []
        self.test_files = {p: file_digest(p) for p in test_files}

    @pytest.hookimpl(trylast=True)  # after pytest's own session plugins have registered
    def pytest_sessionstart(self, session):
        self.pm = session.config.pluginmanager
        self.objects = watched_objects()
        self.hooks = self.hook_table()

    def hook_table(self) -> dict:
        return {name: tuple((impl.plugin_name, id(impl.function)) for impl in caller.get_hookimpls())
                for name, caller in vars(self.pm.hook).items() if hasattr(caller, "get_hookimpls")}

    def check(self, when: str) -> None:
        now = watched_objects()
        changed = sorted(".".join(k) for k, v in self.objects.items() if now.get(k, v) != v or k not in now)
        if changed:
            self.problems.append(f"{when}: test machinery replaced: {', '.join(changed[:8])}")
        hooks = self.hook_table()
        extra = sorted({f"{h} of {p}" for h, impls in hooks.items() for p, f in set(impls) - set(self.hooks.get(h, ()))})
        if extra:
            self.problems.append(f"{when}: pytest hooks added or replaced: {', '.join(extra[:8])}")
        edited = sorted(p for p, d in self.test_files.items() if file_digest(p) != d)
        if edited:
            self.problems.append(f"{when}: test files modified: {', '.join(edited)}")
        self.objects, self.hooks = now, hooks  # report each change once

    def pytest_collection_finish(self, session):
        self.check("after collection")

    def pytest_runtest_logreport(self, report):
        node = report.nodeid.split("[")[0]
        seen = self.phases.setdefault(node, set())
        if report.failed:
            seen.add("E" if report.when in ("setup", "teardown") else "F")
        elif report.skipped:
            seen.add("S")
        elif report.when == "call" and report.passed:
            seen.add("P")

    def pytest_sessionfinish(self, session):
        self.check("at the end")

    def outcome(self, node: str) -> str:
        seen = self.phases.get(node, set())
        for code in ("E", "F", "S", "P"):  # the worst outcome of any phase or subtest
            if code in seen:
                return code
        return "M"


def main() -> None:
    job_path = os.path.join(HERE, "job.json")
    with open(job_path) as fh:
        job = json.load(fh)
    os.unlink(job_path)
    key = bytes.fromhex(job.pop("key"))
    verdict = os.dup(1)
    os.dup2(2, 1)  # pytest and the code under test print to stderr; stdout is the verdict's alone
    for var in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONPYCACHEPREFIX"):
        os.environ.pop(var, None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    sys.dont_write_bytecode = True
    sys.pycache_prefix = tempfile.mkdtemp(prefix="pyc-")  # no bytecode cached in the checkout is read
    ini = os.path.join(tempfile.mkdtemp(prefix="ini-"), "pytest.ini")
    with open(ini, "w") as fh:
        fh.write(job["ini"])
    grader = Grader(job["ids"], job["test_files"])
    root = os.path.normpath(os.path.join(os.getcwd(), job["import_root"]))
    if root not in sys.path:  # where the runtime's .pth does not already put the checkout
        sys.path.append(root)
    code = pytest.main(["-c", ini, "--rootdir", os.getcwd(), "--noconftest", "-p", "no:cacheprovider",
                        "-o", "addopts=", "-q", "--tb=line", "--no-header", *job["ids"]],
                       plugins=[grader])
    payload = json.dumps({"outcomes": "".join(grader.outcome(i) for i in job["ids"]),
                          "problems": grader.problems, "exit": int(code)}, sort_keys=True)
    mac = hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()
    os.write(verdict, f"\n{TAG} {mac} {payload}\n".encode())


if __name__ == "__main__":
    main()
