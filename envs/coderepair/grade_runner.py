"""CodeRepair's test runner inside the evaluation sandbox (copied in by the grader, never shown to
the agent). It runs the rewritten test modules (instrument.py) with pytest, whose checks record
what they observe (recorder.py) instead of passing or failing (`random` is seeded per test from
the job, so a test draws the same values in every run), and writes the records and each
test's status to `recording.json` in its folder. It decides nothing and knows no expected value:
it runs in the same process as the repository's code, so everything it writes is untrusted, and
the grader outside the sandbox compares it with the fixed tree's records (grading.py).
Each test starts on the job's wall clock (time-machine, ticking), so the fixed tree's records,
cached on one day, hold on every other: `time.time`, `datetime.now`, `date.today` and their kin
read the same instant at each test's start in every run. Monotonic clocks and subprocesses keep
the real time (durations and timeouts behave as they would).
"""
import json
import os
import random
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # the recorder (`python -I` puts no script folder on sys.path)

import pytest  # noqa: E402 - from the read-only test runtime; imports nothing of the repository
import time_machine  # noqa: E402 - from the same runtime

import _clbench_rec as recorder  # noqa: E402


class Statuses:
    """The pytest plugin: which test the recorder records for, and how each test ended."""

    def __init__(self, seeds: dict, clock: float):
        self.status = {}
        self.seeds = seeds
        self.clock = clock

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        recorder.CURRENT[0] = item.nodeid
        # the same random draws in every run of a test, whatever it runs under (setUp draws too)
        random.seed(self.seeds.get(item.nodeid.split("[")[0], 0))
        self.status.setdefault(item.nodeid, "ok")
        travel = time_machine.travel(self.clock, tick=True)  # setUp and teardown read it too
        travel.start()
        try:
            yield
        finally:
            travel.stop()
        recorder.CURRENT[0] = "<between tests>"

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.status[report.nodeid] = "error" if report.when != "call" else "failed"
        elif report.skipped and self.status.get(report.nodeid) == "ok":
            self.status[report.nodeid] = "skipped"


def main() -> None:
    job_path = os.path.join(HERE, "job.json")
    with open(job_path) as fh:
        job = json.load(fh)
    os.unlink(job_path)
    os.dup2(2, 1)  # what the tests print goes to stderr
    for var in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONPYCACHEPREFIX"):
        os.environ.pop(var, None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    sys.dont_write_bytecode = True
    sys.pycache_prefix = tempfile.mkdtemp(prefix="pyc-")
    ini = os.path.join(tempfile.mkdtemp(prefix="ini-"), "pytest.ini")
    with open(ini, "w") as fh:
        fh.write(job["ini"])
    root = os.path.normpath(os.path.join(os.getcwd(), job["import_root"]))
    if root not in sys.path:  # where the runtime's .pth does not already put the checkout
        sys.path.append(root)
    random.seed(0)  # module-level draws at import
    plugin = Statuses(job.get("seeds", {}), job["clock"])
    time_machine.travel(job["clock"], tick=True).start()  # imports and collection too
    pytest.main(["-c", ini, "--rootdir", os.getcwd(), "--noconftest", "-p", "no:cacheprovider",
                 "-p", "no:randomly", "-o", "addopts=", "-q", "--tb=line", "--no-header", *job["ids"]],
                plugins=[plugin])
    tests = {node: {"status": status, "records": recorder.RECORDS.get(node, [])}
             for node, status in plugin.status.items()}
    with open(os.path.join(HERE, "recording.json"), "w") as fh:
        json.dump({"tests": tests}, fh)


if __name__ == "__main__":
    main()
