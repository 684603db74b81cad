"""Scan run inside a sandbox (copied in as a file, run by the runtime's python): every file the
sandbox can read, and every Python member of the archives among them (wheels, zips, tarballs), is
hashed as it is, normalized (comments, blank lines, imports and indentation dropped, so a vendored
copy whose imports were rewritten still matches) and function by function (each function that
parses, as `ast.unparse` writes it: another release of the package that shares the fixed
function matches), and compared with the digests of the repository releases' modules and
functions given in `digests.json` beside this file (files larger than twice the largest module
cannot be a copy and are only counted). A file is parsed only when it defines a release function's
name and holds every identifier of a release function of that name, and only functions of the
names that pass are unparsed: a function that matches does both, so this changes no match and
saves most of the time (tests/test_copy_scan.py checks it). Files are hashed by one worker per
core, in the walk's order. Prints nothing; writes the matches outside the checkout (`skip`) to `matches.json` beside this file.
"""
import ast
import collections
import hashlib
import json
import multiprocessing
import os
import re
import stat
import sys
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ARCHIVES = (".whl", ".zip", ".egg", ".pyz", ".tar", ".tar.gz", ".tgz")
MAX_FILE = 64 << 20


#: functions shorter than this (as unparsed) are too common to mean a copy
MIN_FUNCTION = 160


SKIPPED = ("#", "import ", "from ")  # lines normalization drops
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: the names after every "def" (no leading \b: a literal start is many times faster to search, and the extra
#: names it finds, as in "undef x", only widen the set of files checked further)
DEF = re.compile(r"def\s+([A-Za-z_][A-Za-z0-9_]*)")
#: the nodes that hold statement lists, where every function definition lives (never inside an expression)
BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case)


def digests(data: bytes, functions: bool = True, needles: dict | None = None) -> list[str]:
    """The file's digest, its normalized digest and (with `functions`) one per function that parses.
    `needles` (release function name -> the identifiers of each wanted function of that name) skips
    work that cannot find a function match: a function that matches is defined in the file under its
    name and holds all its identifiers, so an ASCII file is parsed only when it defines such a name
    and holds every identifier of one of that name's functions (tested as substrings first, then as
    words), and only functions of the names that pass are unparsed. Python normalizes non-ASCII
    identifiers, so those files are parsed and every wanted name unparsed."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:  # not Python source: as it is, or once decoded, no release module
        return [hashlib.sha256(data).hexdigest()]
    kept = [line for line in map(str.strip, text.splitlines()) if line and not line.startswith(SKIPPED)]
    out = [hashlib.sha256(data).hexdigest(), "n" + hashlib.sha256("\n".join(kept).encode()).hexdigest()]
    if not functions or "def " not in text:
        return out
    names = None if needles is None else frozenset(needles)
    if needles is not None and text.isascii():
        passing, words = set(), None
        for name in names.intersection(DEF.findall(text)):
            # substrings first: necessary for words, and far cheaper than splitting the file into words
            found = [ids for ids in needles[name] if all(i in text for i in ids)]
            if found:
                words = set(WORD.findall(text)) if words is None else words
                if any(words.issuperset(ids) for ids in found):
                    passing.add(name)
        if not passing:
            return out
        names = frozenset(passing)
    out += ["f" + hashlib.sha256(code.encode()).hexdigest() for _, code in long_functions(text, names)]
    return out


def needle_index(needles: dict) -> dict[str, list[list[str]]]:
    """`digests`' needles from release_modules' (name -> identifier lists): the longest, rarest
    identifiers first, so that the substring test of a file that lacks one fails early."""
    return {name: [sorted(ids, key=len, reverse=True) for ids in found] for name, found in needles.items()}


def identifiers(node: ast.AST) -> list[str]:
    """Every name, attribute and argument in `node`, sorted."""
    found = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    found |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    found |= {n.arg for n in ast.walk(node) if isinstance(n, ast.arg)}
    found.add(node.name)
    return sorted(found)


def long_functions(source, names: frozenset | None = None) -> list[tuple[ast.AST, str]]:
    """(node, unparsed text) of the module's functions long enough to digest (of `names` only, if
    given); none when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    found = []
    for node in statements(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (names is None or node.name in names):
            code = ast.unparse(node)
            if len(code) >= MIN_FUNCTION:
                found.append((node, code))
    return found


def statements(tree: ast.Module):
    """The module's statements (and except handlers and match cases), breadth first in the order of
    `ast.walk`, without walking the expressions, which hold no statement."""
    todo = collections.deque(tree.body)
    while todo:
        node = todo.popleft()
        yield node
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                todo.extend(child for child in value if isinstance(child, BLOCKS))


def members(path: str):
    """(name, bytes) of the .py members of an archive."""
    try:
        if path.endswith((".tar", ".tar.gz", ".tgz")):
            with tarfile.open(path) as tar:
                for m in tar.getmembers():
                    if m.isfile() and m.name.endswith(".py") and m.size < MAX_FILE:
                        yield m.name, tar.extractfile(m).read()
        else:
            with zipfile.ZipFile(path) as z:
                for name in z.namelist():
                    if name.endswith(".py"):
                        yield name, z.read(name)
    except Exception:  # noqa: BLE001 - not an archive after all
        return


def scan(path: str, size: int) -> list[list[str]]:
    """[path (or path!member), release module] for every digest of one regular file, or of the Python
    members of an archive, that is a release's (JOB: the digests, needles and size limit)."""
    wanted, needles = JOB["wanted"], JOB["needles"]
    found = []
    try:
        if path.endswith(ARCHIVES) and size < MAX_FILE:
            for inner, data in members(path):
                found += [[f"{path}!{inner}", wanted[d]] for d in digests(data, needles=needles) if d in wanted]
            return found
        if size > JOB["largest"]:  # larger than any module (even with rewritten imports): no copy
            return found
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return found
    return [[path, wanted[d]] for d in digests(data, needles=needles) if d in wanted]


def _scan(item: tuple[str, int]) -> list[list[str]]:
    return scan(*item)


#: what `scan` compares with, set by `main` before the workers fork
JOB: dict = {}


def regular_files(skip: str) -> list[tuple[str, int]]:
    """(path, size) of every regular file the sandbox can read, outside `skip` and /proc, /sys, /dev."""
    files = []
    for dirpath, dirnames, filenames in os.walk("/"):
        if dirpath in ("/proc", "/sys", "/dev") or dirpath == skip or dirpath.startswith(skip + "/"):
            dirnames[:] = []
            continue
        dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in ("/proc", "/sys", "/dev")]
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                info = os.lstat(path)  # one stat: links are not followed, only regular files read
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                files.append((path, info.st_size))
    return files


def main() -> None:
    with open(os.path.join(HERE, "digests.json")) as fh:
        job = json.load(fh)
    JOB.update(wanted=job["digests"], largest=job["largest"], needles=needle_index(job["needles"]))
    files = regular_files(job["skip"].rstrip("/"))
    found = []
    # hashing is CPU-bound: one worker per core the sandbox may use, in the walk's order (the same matches in the
    # same order as one process); where no worker can start (no /dev/shm for its locks) one process scans it all
    try:
        with multiprocessing.get_context("fork").Pool(len(os.sched_getaffinity(0))) as pool:
            for matches in pool.imap(_scan, files, chunksize=64):
                found += matches
    except OSError:
        found = [m for item in files for m in _scan(item)]
    with open(os.path.join(HERE, "matches.json"), "w") as fh:
        json.dump({"scanned": len(files), "matches": found, "python": sys.version}, fh)


if __name__ == "__main__":
    main()
