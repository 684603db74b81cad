"""Scripted reference and red-team agents use only what an agent could have: no agent module may
import a module of an env package (clbench.envs.<task>...) that the env does not declare public
(`public_modules`). Privileged agents (oracles, `privileged = True`) may read truth: imports inside
their class bodies are allowed, and so are those inside the red team's measuring functions marked
`@redteam.privileged` (clbench.redteam.privileged: tools, never agents); everything at module level, or in
any other class or function, counts.

A static walk (ast) of agents/**/*.py, following imports of other agent modules (clbench.agents.*)."""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

from clbench.registry import clbench_env_ids, env_class

AGENTS = Path(__file__).resolve().parents[1] / "agents"


def public_modules() -> set[str]:
    """Every module some env declares public, as full names (clbench.envs.<task>.<module>)."""
    out = set()
    for env_id in clbench_env_ids():
        cls = env_class(env_id)
        for name in cls.public_modules:
            out.add(name if name.startswith("clbench.") else f"clbench.envs.{cls.task}.{name}")
    return out


#: the decorator that marks a red-team measuring function privileged, as it may be written
PRIVILEGED_MARKS = {"privileged", "redteam.privileged", "clbench.redteam.privileged"}


def _privileged(node: ast.AST) -> bool:
    """A class whose body says `privileged = True`, or a function decorated with clbench.redteam.privileged."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return any(ast.unparse(d) in PRIVILEGED_MARKS for d in node.decorator_list)
    if not isinstance(node, ast.ClassDef):
        return False
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "privileged" for t in stmt.targets):
            return isinstance(stmt.value, ast.Constant) and stmt.value.value is True
    return False


def imports(source: str, module: str) -> list[tuple[int, str]]:
    """(line, imported module) of every import outside a privileged class's or function's body. `module`
    is the dotted name of the file (for relative imports)."""
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        if _privileged(node):
            skip.update(id(n) for n in ast.walk(node))
    package = module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            # `from clbench.envs.poker import cards` imports the module clbench.envs.poker.cards
            found += [(node.lineno, f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base)
                      for alias in node.names]
    return sorted(set(found))


def _is_module(name: str) -> bool:
    """Whether `name` is an env module (a file or package under envs/), without importing it."""
    if not name.startswith("clbench.envs."):
        return False
    path = AGENTS.parent / "envs" / Path(*name.split(".")[2:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def truth_imports(source: str, module: str, public: set[str]) -> list[tuple[int, str]]:
    """Imports of env modules that are not declared public."""
    out = []
    for line, name in imports(source, module):
        if not name.startswith("clbench.envs.") and name != "clbench.envs":
            continue
        if any(name == p or name.startswith(p + ".") for p in public):
            continue
        out.append((line, name))
    return out


def agent_modules() -> dict[str, Path]:
    return {"clbench.agents." + ".".join(p.relative_to(AGENTS).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sorted(AGENTS.rglob("*.py"))}


@cache
def violations() -> dict[str, list[str]]:
    """Per agent module: the truth modules it imports, directly or through other agent modules."""
    public, mods = public_modules(), agent_modules()
    direct = {m: truth_imports(p.read_text(), m, public) for m, p in mods.items()}
    uses = {m: [n for _, n in imports(p.read_text(), m) if n in mods] for m, p in mods.items()}
    out = {}
    for m in mods:
        seen, todo, bad = set(), [m], []
        while todo:
            cur = todo.pop()
            if cur in seen:
                continue
            seen.add(cur)
            bad += [f"{name} (line {line} of {mods[cur].relative_to(AGENTS.parent)})" for line, name in direct[cur]]
            todo += uses[cur]
        if bad:
            out[m] = sorted(set(bad))
    return out


@pytest.mark.parametrize("module", sorted(agent_modules()))
def test_agents_import_no_ground_truth(module):
    bad = violations().get(module)
    assert not bad, (f"{module} imports env modules that hold ground truth (declare them in the env's "
                     f"public_modules if they hold none, or import them inside the oracle class or a measuring "
                     f"function marked @redteam.privileged): {bad}")


def test_a_function_marked_privileged_reads_truth():
    """The mark says a measuring function imports env modules an agent may not: one that imports none has no
    business carrying it (it would hide nothing today and whatever is imported there tomorrow)."""
    public, idle = public_modules(), []
    for module, path in agent_modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _privileged(node):
                body = ast.unparse(ast.Module(body=node.body, type_ignores=[]))
                if not truth_imports(body, module, public):
                    idle.append(f"{module}.{node.name}")
    assert not idle, f"marked @redteam.privileged but importing no ground truth: {idle}"


PLANTED = '''
from clbench.agent import Agent
from clbench.envs.poker.cards import parse_cards
from clbench.envs.poker import opponents, cards
import clbench.envs.poker.strength as s


class Oracle(Agent):
    privileged = True

    def act(self, obs, info):
        from clbench.envs.poker.opponents import make_opponent  # oracles may read truth
        return ""


class Reference(Agent):
    def act(self, obs, info):
        from clbench.envs.poker.table import STREETS
        return ""


@redteam.privileged
def measure(env):
    from clbench.envs.poker.betting import Betting  # a red-team measuring tool may read truth
    return 0


@functools.cache
def helper(env):
    from clbench.envs.poker.policy import Spot  # another decorator marks nothing
    return 0
'''


def test_the_walk_finds_planted_truth_imports():
    found = {name for _, name in truth_imports(PLANTED, "clbench.agents.planted", {"clbench.envs.poker.cards"})}
    assert found == {"clbench.envs.poker.opponents", "clbench.envs.poker.strength", "clbench.envs.poker.table",
                     "clbench.envs.poker.policy"}
    # what an env declares public is allowed, and so is everything once all of it is public
    everything = {f"clbench.envs.poker.{m}" for m in ("cards", "opponents", "strength", "table", "policy")}
    assert truth_imports(PLANTED, "clbench.agents.planted", everything) == []
