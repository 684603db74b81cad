"""The copy scan's shortcuts (copy_scan.py parses a file only when it defines a release function's name
and holds every identifier of a release function of that name, unparses only functions of the names
that pass, and looks for functions among statements only) change no match: the scan with and without
them finds the same release digests in the releases themselves, in copies with rewritten imports and
indentation, in another module carrying one release function, and in unrelated code."""
import ast
import os
import sysconfig
from pathlib import Path

import platformdirs
import pytest
import yaml

from clbench.envs.coderepair.copies import release_modules
from clbench.envs.coderepair.copy_scan import digests, needle_index, statements
from clbench.envs.coderepair.sources import pristine_tree

ROOT = Path(__file__).resolve().parents[1]
#: the user's real cache (the sdists), captured before conftest.py redirects XDG_CACHE_HOME per test
REAL_CACHE = os.environ.get("CLBENCH_CACHE_DIR") or platformdirs.user_cache_dir("clbench")


@pytest.fixture(autouse=True)
def _shared_cache(monkeypatch):
    monkeypatch.setenv("CLBENCH_CACHE_DIR", REAL_CACHE)


def test_the_scan_shortcuts_change_no_match():
    repos = yaml.safe_load((ROOT / "tasks/coderepair/default.yaml").read_text())["repos"]
    wanted, _, needles = release_modules(repos)
    needles = needle_index(needles)
    samples = []
    for repo in repos.values():
        tree = pristine_tree(repo["pypi"], repo["version"], repo["sdist_sha256"])
        for path in sorted(tree.rglob("*.py"))[:12]:
            data = path.read_bytes()
            samples.append(data)
            samples.append(b"import os as _o\n" + data.replace(b"\nimport ", b"\nimport  "))
            try:  # one release function, alone inside an unrelated class
                fn = next(n for n in ast.walk(ast.parse(data)) if isinstance(n, ast.FunctionDef)
                          and len(ast.unparse(n)) >= 160)
            except (StopIteration, SyntaxError):
                continue
            body = "\n".join("    " + line for line in ast.unparse(fn).splitlines())
            samples.append(f"class Other:\n    x = 1\n\n{body}\n".encode())
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    samples += [p.read_bytes() for p in sorted(stdlib.glob("*.py"))[:20]]
    found = 0
    for data in samples:
        try:  # the statement walk finds every function ast.walk finds, in its order
            tree = ast.parse(data)
        except SyntaxError:
            tree = None
        if tree is not None:
            functions = (ast.FunctionDef, ast.AsyncFunctionDef)
            assert [n for n in statements(tree) if isinstance(n, functions)] == \
                [n for n in ast.walk(tree) if isinstance(n, functions)]
        full = set(digests(data)) & set(wanted)
        assert set(digests(data, needles=needles)) & set(wanted) == full
        found += any(d.startswith("f") for d in full)
    assert found > 5  # function matches were exercised, not only whole files
