"""The honest CodeRepair reference's search, sent into the sandbox as a script (stdlib only).

Usage: python3 search.py CHECK SOURCE_ROOT START COUNT KINDS NAMES FRAMES [TEST_COMMAND]
Tries one catalog edit at a time on the functions the agent points at (FRAMES: file:function
pairs from the check's traceback, innermost first; NAMES: names from the report; then the
functions those call), in the order KINDS lists the edit kinds. Each edit is kept only if the
CHECK script (the report's reproduction with its stated expectations) then exits 0 and the
TEST_COMMAND (the visible tests) passes; otherwise the file is restored. It stops after COUNT
edits (or TIME_CAP CPU seconds, or WALL_CAP seconds on a very busy machine), printing
`NEXT <index>` to resume from, or `FIXED <index> <kind> <file>:<line> <edit>`, or `EXHAUSTED <count>`; before that, once,
`TESTS-UNUSABLE <exit> <index>` if for an edit that passed the CHECK the TEST_COMMAND tested
nothing at all (pytest exit 4, e.g. a path that does not exist, or 5, no tests collected).
Its limits count CPU time where they can, so the same edits are tried and kept on a busy machine
as on an idle one: an edit that loops is cut at CHECK_CPU CPU seconds, one that sleeps or blocks
at CHECK_TIMEOUT seconds.
Each check runs in a child forked from this process after it imported, once, what the check imports
from the interpreter's libraries (the standard library, site-packages): a fresh `python CHECK` spent
most of its time importing those again for every edit. The child imports the code under repair from
disk, as a fresh interpreter would; when that cannot be ensured (a library module imported the code
under repair, or a thread runs) every check is a fresh interpreter again.
"""
import ast
import contextlib
import importlib
import os
import resource
import runpy
import select
import signal
import subprocess
import sys
import sysconfig
import threading
import time

#: the catalog's edit kinds, in the order a newcomer tries them (the agent passes its own order)
KINDS = ("comparison", "off_by_one", "swap_statements", "constant_to_name", "attribute_swap", "attribute_added",
         "keyword_restored", "negation", "swapped_arguments")
_FLIP = {ast.Lt: (ast.LtE, ast.Gt), ast.LtE: (ast.Lt, ast.GtE), ast.Gt: (ast.GtE, ast.Lt), ast.GtE: (ast.Gt, ast.LtE),
         ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,), ast.Is: (ast.IsNot,), ast.IsNot: (ast.Is,), ast.In: (ast.NotIn,),
         ast.NotIn: (ast.In,)}
CHECK_CPU = 4  # CPU seconds of a check
CHECK_TIMEOUT = 15.0  # wall seconds of a check that sleeps or blocks (a busy machine's slow start is not this)
TIME_CAP = 45.0  # CPU seconds of a batch, the search's and its checks'
WALL_CAP = 55.0  # below the env's 60 s per command
#: the file under trial and its original bytes, so a search killed mid-trial is undone by the next one
RESTORE = "/tmp/.search-restore"


class Source:
    """One module: its text, its tree and offsets of its lines (ast columns are UTF-8 byte offsets)."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as fh:
            self.data = fh.read()
        self.tree = ast.parse(self.data)
        self.starts = [0]
        for line in self.data.split(b"\n"):
            self.starts.append(self.starts[-1] + len(line) + 1)

    def span(self, node):
        return (self.starts[node.lineno - 1] + node.col_offset, self.starts[node.end_lineno - 1] + node.end_col_offset)

    def text(self, node):
        a, b = self.span(node)
        return self.data[a:b].decode()

    def replaced(self, node, text):
        a, b = self.span(node)
        return self.data[:a] + text.encode() + self.data[b:]


def functions(tree):
    """(qualified name, node) of every function and method."""
    out = []

    def visit(body, prefix):
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, prefix + node.name + ".")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((prefix + node.name, node))
                visit(node.body, prefix + node.name + ".")
    visit(tree.body, "")
    return out


def targets(root, names, frames):
    """Functions to edit, most suspect first: traceback frames, then named ones, then what they call."""
    sources = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("tests", "test")]  # a release may ship its tests in the package
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                try:
                    sources[path] = Source(path)
                except (SyntaxError, ValueError, OSError):
                    pass
    table = [(path, q, node) for path in sorted(sources) for q, node in functions(sources[path].tree)]
    chosen = []

    def add(item):
        if item not in chosen:
            chosen.append(item)

    for frame in frames:
        path, _, func = frame.rpartition(":")
        for p, q, node in table:
            if os.path.abspath(p) == os.path.abspath(path) and q.split(".")[-1] == func:
                add((p, q, node))
    for name in names:  # a function of that name, or a class's constructor and __call__
        for p, q, node in table:
            parts = q.split(".")
            if parts[-1] == name or (len(parts) > 1 and parts[-2] == name and parts[-1] in ("__init__", "__call__")):
                add((p, q, node))
    called = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", None)
              for _, _, node in list(chosen) for n in ast.walk(node) if isinstance(n, ast.Call)}
    for p, q, node in table:
        if q.split(".")[-1] in called:
            add((p, q, node))
    return sources, chosen


def local_names(func):
    names = [a.arg for a in func.args.args + func.args.kwonlyargs]
    names += [n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    return [n for n in dict.fromkeys(names) if n not in ("self", "cls")]


def edits(kind, src, func):
    """(line, description, new file bytes) of every edit of this kind inside func."""
    nodes = list(ast.walk(func))
    if kind == "comparison":
        for n in nodes:
            if isinstance(n, ast.Compare):
                for i, op in enumerate(n.ops):
                    for alt in _FLIP.get(type(op), ()):
                        new = ast.Compare(n.left, n.ops[:i] + [alt()] + n.ops[i + 1:], n.comparators)
                        yield n.lineno, ast.unparse(new), src.replaced(n, ast.unparse(new))
    elif kind == "off_by_one":
        spots = [n.slice for n in nodes if isinstance(n, ast.Subscript) and not isinstance(n.slice, ast.Slice)]
        spots += [c for n in nodes if isinstance(n, ast.Compare) for c in [n.left, *n.comparators]]
        for spot in spots:
            for e in ast.walk(spot):
                if isinstance(e, (ast.Name, ast.Attribute, ast.Call, ast.Constant)) and not (
                        isinstance(e, ast.Constant) and not isinstance(e.value, int)):
                    for delta in (" - 1", " + 1"):
                        yield e.lineno, src.text(e) + delta, src.replaced(e, f"({src.text(e)}{delta})")
    elif kind == "swap_statements":
        for n in nodes:
            for field in ("body", "orelse", "finalbody"):
                body = getattr(n, field, None)
                if not isinstance(body, list):
                    continue
                for a, b in zip(body, body[1:]):
                    if not isinstance(a, ast.stmt) or a.lineno == b.lineno:
                        continue
                    lines = src.data.split(b"\n")
                    first, second = lines[a.lineno - 1:a.end_lineno], lines[b.lineno - 1:b.end_lineno]
                    between = lines[a.end_lineno:b.lineno - 1]
                    new = lines[:a.lineno - 1] + second + between + first + lines[b.end_lineno:]
                    yield a.lineno, f"swap lines {a.lineno} and {b.lineno}", b"\n".join(new)
    elif kind == "constant_to_name":
        names = local_names(func)
        for n in nodes:
            if isinstance(n, ast.Compare):
                for c in [n.left, *n.comparators]:
                    if isinstance(c, ast.Constant) and isinstance(c.value, int) and not isinstance(c.value, bool):
                        for name in names:
                            yield c.lineno, f"{c.value} -> {name}", src.replaced(c, name)
    elif kind == "attribute_swap":
        used = {}
        for n in ast.walk(src.tree):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
                used.setdefault(n.value.id, []).append(n.attr)
        for n in nodes:
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and isinstance(n.ctx, ast.Load):
                for other in dict.fromkeys(used.get(n.value.id, ())):
                    if other != n.attr:
                        yield n.lineno, f"{n.value.id}.{n.attr} -> .{other}", src.replaced(n, f"{n.value.id}.{other}")
    elif kind == "attribute_added":
        attrs = {}
        for n in nodes:
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
                attrs.setdefault(n.value.id, []).append(n.attr)
        for n in nodes:
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                for attr in dict.fromkeys(attrs.get(n.id, ())):
                    yield n.lineno, f"{n.id} -> {n.id}.{attr}", src.replaced(n, f"{n.id}.{attr}")
    elif kind == "keyword_restored":
        known = set(local_names(func))
        for n in ast.walk(src.tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                known.update(a.arg for a in n.args.args + n.args.kwonlyargs)
            elif isinstance(n, ast.keyword) and n.arg:
                known.add(n.arg)
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
                known.add(n.attr)
        for n in nodes:
            if not isinstance(n, ast.Call) or not n.keywords or any(k.arg is None for k in n.keywords):
                continue
            shapes = {ast.unparse(k.value).replace(k.arg, "{K}") for k in n.keywords}
            if len(shapes) != 1 or "{K}" not in next(iter(shapes)):
                continue
            shape = next(iter(shapes))
            given = {k.arg for k in n.keywords}
            for name in sorted(known - given):
                if name.startswith("_"):
                    continue
                value = ast.parse(shape.replace("{K}", name), mode="eval").body
                new = ast.Call(n.func, n.args, n.keywords + [ast.keyword(name, value)])
                yield n.lineno, f"add {name}={ast.unparse(value)}", src.replaced(n, ast.unparse(new))
    elif kind == "negation":
        for n in nodes:
            if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
                yield n.lineno, "drop not", src.replaced(n, f"({src.text(n.operand)})")
            elif isinstance(n, (ast.If, ast.While)) and not isinstance(n.test, ast.UnaryOp):
                yield n.test.lineno, "add not", src.replaced(n.test, f"not ({src.text(n.test)})")
    elif kind == "swapped_arguments":
        for n in nodes:
            if isinstance(n, ast.Call) and len(n.args) >= 2 and not any(isinstance(a, ast.Starred) for a in n.args):
                for i in range(len(n.args)):
                    for j in range(i + 1, len(n.args)):
                        args = list(n.args)
                        args[i], args[j] = args[j], args[i]
                        new = ast.Call(n.func, args, n.keywords)
                        yield n.lineno, f"swap arguments {i + 1} and {j + 1}", src.replaced(n, ast.unparse(new))


def candidates(kinds, sources, chosen):
    for kind in kinds:
        for path, qual, func in chosen:
            for line, what, data in edits(kind, sources[path], func):
                yield kind, path, line, what, data


#: pytest's exit codes for a run that never tested anything: usage error (e.g. no such path), no tests collected
UNUSABLE = (4, 5)


def exit_code(command, timeout, cpu=None):
    def bound():
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))

    try:
        return subprocess.run(command, shell=True, capture_output=True, timeout=timeout,
                              preexec_fn=bound if cpu else None).returncode
    except subprocess.TimeoutExpired:
        return -1


def passes(command, timeout, cpu=None):
    return exit_code(command, timeout, cpu) == 0


#: the directories of the interpreter's own libraries: modules from there never hold the code under repair
LIBRARIES = tuple(sorted({sysconfig.get_path(k) + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib")}))
def library_module(module):
    """Whether nothing of `module` comes from outside the interpreter's libraries (modules made in
    memory, such as typing.io, come from nowhere)."""
    spec = getattr(module, "__spec__", None)
    origin = getattr(spec, "origin", None) or getattr(module, "__file__", None) or ""
    if origin not in ("", "built-in", "frozen") and not origin.startswith(LIBRARIES):
        return False
    return all(str(p).startswith(LIBRARIES) for p in (getattr(module, "__path__", None) or ()))


def probe(check, listing):
    """Run the CHECK once (its verdict is ignored) and write to LISTING the names of the library
    modules it imported (`python search.py --probe CHECK LISTING`, a fresh interpreter)."""
    sys.argv = [check]
    try:
        runpy.run_path(check, run_name="__main__")
    except BaseException:
        pass
    names = [n for n, m in list(sys.modules.items()) if n != "__main__" and library_module(m)]
    with open(listing, "w") as fh:
        fh.write("\n".join(names))


def preload(check):
    """Import here the library modules the CHECK imports (`probe`); True when checks may then run in
    forked children: nothing but library modules (and this script) is imported and no other thread runs."""
    listing = "/tmp/.search-preload"
    try:
        subprocess.run([sys.executable, os.path.abspath(__file__), "--probe", check, listing], capture_output=True,
                       timeout=CHECK_TIMEOUT, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CPU,
                                                                                   (CHECK_CPU, CHECK_CPU)))
        with open(listing) as fh:
            names = [n for n in fh.read().split("\n") if n]
        os.unlink(listing)
    except (OSError, subprocess.SubprocessError):
        return False
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
        for name in names:
            try:
                importlib.import_module(name)
            except BaseException:  # a module that imports only as a side effect of another: the child imports it
                pass
    return threading.active_count() == 1 and all(
        library_module(m) for n, m in list(sys.modules.items()) if n != "__main__")


def _status(code):
    """The exit status a fresh interpreter gives for SystemExit(code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1


def forked_exit_code(check, timeout, cpu):
    """What `python CHECK` exits with, run in a forked child of this (preloaded) process: its own
    process group, CHECK_CPU CPU seconds, output discarded; -1 when it runs past `timeout` seconds."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into the search
        code = 1
        try:
            os.setpgid(0, 0)
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            sys.argv = [check]
            try:
                runpy.run_path(check, run_name="__main__")
                code = 0
            except SystemExit as exc:
                code = _status(exc.code)
            threading._shutdown()  # as the interpreter does at exit: wait for the check's threads
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    status = None
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd (before Linux 5.3): poll
        deadline = time.monotonic() + timeout
        while status is None and time.monotonic() < deadline:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
            else:
                time.sleep(0.002)
    else:
        if select.select([fd], [], [], timeout)[0]:
            status = os.waitpid(pid, 0)[1]
        os.close(fd)
    if status is None:  # past the timeout: the check and whatever it started
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return -1
    return os.waitstatus_to_exitcode(status)


def cpu_spent():
    """CPU seconds of this process and the commands it ran (those it waited for)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main(argv):
    if argv[:1] == ["--probe"]:
        probe(*argv[1:3])
        return
    check, root, start, budget, kinds, names, frames = argv[:7]
    tests = argv[7] if len(argv) > 7 else ""
    start, count = int(start), int(budget)
    began = time.monotonic()
    if os.path.exists(RESTORE):
        with open(RESTORE, "rb") as fh:
            path, _, original = fh.read().partition(b"\0")
        with open(path, "wb") as fh:
            fh.write(original)
        os.unlink(RESTORE)
    sources, chosen = targets(root, [n for n in names.split(",") if n], [f for f in frames.split(",") if f])
    index, unusable, forking = -1, False, None
    for index, (kind, path, line, what, data) in enumerate(candidates(kinds.split(","), sources, chosen)):
        if index < start:
            continue
        if index >= start + count or cpu_spent() > TIME_CAP or time.monotonic() - began > WALL_CAP:
            print(f"NEXT {index}")
            return
        try:
            ast.parse(data)
        except SyntaxError:
            continue
        if forking is None:  # once, on the untouched code, before the first edit is tried
            forking = os.environ.get("CLBENCH_SEARCH_FORK", "1") != "0" and preload(check)
        original = sources[path].data
        with open(RESTORE, "wb") as fh:
            fh.write(path.encode() + b"\0" + original)
        with open(path, "wb") as fh:
            fh.write(data)
        if (forked_exit_code(check, CHECK_TIMEOUT, CHECK_CPU) == 0 if forking else
                passes(f"{sys.executable} {check}", CHECK_TIMEOUT, CHECK_CPU)):
            code = exit_code(tests, 120) if tests else 0
            if code == 0:
                os.unlink(RESTORE)
                print(f"FIXED {index} {kind} {path}:{line} {what}")
                return
            if code in UNUSABLE and not unusable:  # the test command, not the edit, failed
                unusable = True
                print(f"TESTS-UNUSABLE {code} {index}")
        with open(path, "wb") as fh:
            fh.write(original)
        os.unlink(RESTORE)
    print(f"EXHAUSTED {index + 1}")


if __name__ == "__main__":
    main(sys.argv[1:])
