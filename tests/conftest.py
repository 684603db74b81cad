"""Shared fixtures. Tests use real components (see each test module's docstring)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Caches (built databases, sdists) go to one session-wide temp dir unless a test overrides it."""
    if "CLBENCH_TEST_KEEP_CACHE" not in os.environ:
        cache = tmp_path_factory.getbasetemp() / "xdg-cache"
        monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    yield
