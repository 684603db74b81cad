"""Shared fixtures and the one gate for `slow` tests. Tests use real components (see each test
module's docstring)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: how to opt in to the tests marked `slow` (pyproject.toml registers the marker)
SLOW_OPT_IN = "CLBENCH_SLOW=1 or -m slow"


def _slow_selected(config) -> bool:
    """Whether this run asked for the slow tests: CLBENCH_SLOW=1, or a -m expression that names
    `slow` other than as `not slow` (`-m slow`, `-m "slow and docker"`)."""
    if os.environ.get("CLBENCH_SLOW") == "1":
        return True
    return bool(re.search(r"(?<!not )\bslow\b", config.getoption("markexpr", "") or ""))


def pytest_collection_modifyitems(config, items):
    """Every test marked `slow` (minutes of sandboxes, or a larger-scale re-run of what a faster
    test checks) is skipped, with the way to run it, unless the run opts in."""
    if _slow_selected(config):
        return
    skip = pytest.mark.skip(reason=f"slow: run with {SLOW_OPT_IN}")
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Caches (built databases, sdists) go to one session-wide temp dir unless a test overrides it."""
    if "CLBENCH_TEST_KEEP_CACHE" not in os.environ:
        cache = tmp_path_factory.getbasetemp() / "xdg-cache"
        monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    yield
