"""The reachable-copy check: no pristine copy of any repository release on the schedule may be
readable inside a sandbox, outside the checkout itself.

`reachable_copies(env, repo)` runs copy_scan.py inside a sandbox of `env`'s backend with `repo`'s
runtime (the one agent commands and gradings run with) and returns every file, or archive member,
whose content (as is, or normalized) equals a module of any release in tasks/coderepair/default.yaml.
It is a test (tests/test_coderepair.py, both backends) and a red-team probe
(`CodeRepairEnv.redteam_probes`).
"""
from __future__ import annotations

import json
import secrets
import shutil
import tempfile
from pathlib import Path

from clbench.envs.coderepair.copy_scan import digests, identifiers, long_functions
from clbench.envs.coderepair.sources import pristine_tree

SCANNER = Path(__file__).with_name("copy_scan.py")
#: modules shorter than this once normalized (empty __init__.py, one import) say nothing about a release
MIN_CHARS = 120


def release_digests(repos: dict) -> dict[str, str]:
    """digest -> "pypi-version:path" for every Python module of every release."""
    return release_modules(repos)[0]


def release_modules(repos: dict) -> tuple[dict[str, str], int, dict[str, list[list[str]]]]:
    """(digest -> "pypi-version:path" for every Python module of every release, the largest one's size,
    function name -> the identifiers of each function of that name digested)."""
    out: dict[str, str] = {}
    largest, needles = 0, {}
    for repo in repos.values():
        tree = pristine_tree(repo["pypi"], repo["version"], repo["sdist_sha256"])
        for path in sorted(tree.rglob("*.py")):
            data = path.read_bytes()
            kept = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines()
                    if ln.strip() and not ln.strip().startswith(("#", "import ", "from "))]
            if sum(map(len, kept)) < MIN_CHARS:
                continue
            largest = max(largest, len(data))
            for d in digests(data):
                out.setdefault(d, f"{repo['pypi']}-{repo['version']}:{path.relative_to(tree)}")
            for node, _ in long_functions(data):
                needles.setdefault(node.name, set()).add(tuple(identifiers(node)))
    return out, largest, {name: [list(ids) for ids in sorted(found)] for name, found in sorted(needles.items())}


def reachable_copies(env, repo_name: str, timeout: float = 900, plant: str = "", tree: Path | None = None) -> dict:
    """{"backend", "repo", "scanned" (files), "matches": [[path, release module], ...]} for one runtime,
    on a copy of `tree` (an agent checkout; default an empty one) at the workdir, which the scan skips.
    `plant`: a command run in the same sandbox first (tests plant a copy to show the scan finds it)."""
    with tempfile.TemporaryDirectory(prefix="clbench-scan-") as tmp:
        folder = f".scan-{secrets.token_hex(4)}"
        if tree is not None:
            shutil.copytree(tree, Path(tmp) / "tree", symlinks=True)
        tree = Path(tmp) / "tree"
        (tree / folder).mkdir(parents=True)
        shutil.copyfile(SCANNER, tree / folder / "copy_scan.py")
        modules, largest, needles = release_modules(env.spec_data["repos"])
        job = {"digests": modules, "skip": env.workdir, "largest": 2 * largest, "needles": needles}
        (tree / folder / "digests.json").write_text(json.dumps(job))
        with env.open_sandbox(tree, repo_name, timeout) as sandbox:
            if plant:
                sandbox.run(plant)
            result = sandbox.run(f'"$VIRTUAL_ENV/bin/python" -I -B {folder}/copy_scan.py', timeout=timeout)
            out = sandbox.host_workspace / folder / "matches.json"
            if not out.is_file():
                raise RuntimeError(f"the copy scan did not finish on {env.backend}: {result.output()[-2000:]}")
            found = json.loads(out.read_text())
    return {"backend": env.backend, "repo": repo_name, "scanned": found["scanned"], "matches": found["matches"]}
