"""`clbench new-env NAME [--root DIR]`: scaffold a new task that works on the first try.

Writes, under the root (a folder laid out like the repository):

    envs/<task>/__init__.py          REGISTRATIONS: clbench/<NAME>-v0
    envs/<task>/<task>_env.py        a small working env (a coin bandit with drift) to replace
    tasks/<task>/default.yaml        max_steps and every number of the task (no r_max/r_reference yet)
    agents/<task>.py                 the reference (learns statefully) and the oracle (reads latent())
    tests/test_<task>.py             env-specific tests
    benchmarks/bench_<task>.py       times env steps

`<task>` is NAME in lower case (the env id's name, see clbench.env.task_name). The default root is
the source checkout the running clbench comes from (an editable install: envs/, tasks/ and
agents/ next to clbench/); otherwise --root is required, and the root goes on $CLBENCH_PATH.
Nothing is ever overwritten. The templates live in clbench/templates/new_env/.
"""
from __future__ import annotations

import importlib.resources
import keyword
import re
from pathlib import Path

#: template file -> where it goes under the root ({task} filled in)
FILES = {
    "envs_init.py.tmpl": "envs/{task}/__init__.py",
    "envs_env.py.tmpl": "envs/{task}/{task}_env.py",
    "default.yaml.tmpl": "tasks/{task}/default.yaml",
    "agents.py.tmpl": "agents/{task}.py",
    "test.py.tmpl": "tests/test_{task}.py",
    "bench.py.tmpl": "benchmarks/bench_{task}.py",
}
_NAME = re.compile(r"[A-Z][A-Za-z0-9]*\Z")


def check_name(name: str) -> str:
    """The task name for env name `name` (CamelCase, e.g. CoinBandit -> coinbandit), or ValueError."""
    if not _NAME.match(name) or not re.search(r"[a-z]", name):
        raise ValueError(f"NAME must be CamelCase letters and digits starting with a capital, e.g. CoinBandit "
                         f"(got {name!r}); the env id becomes clbench/NAME-v0")
    task = name.lower()
    if keyword.iskeyword(task) or not task.isidentifier():
        raise ValueError(f"NAME {name!r} gives the task name {task!r}, which is not a Python module name")
    return task


def source_root() -> Path | None:
    """The checkout the running clbench comes from: the folder holding clbench/, envs/, tasks/ and
    agents/ (an editable install), or None for an installed wheel."""
    import clbench

    root = Path(clbench.__file__).resolve().parent.parent
    return root if all((root / d).is_dir() for d in ("envs", "tasks", "agents")) else None


def taken(name: str, task: str) -> str | None:
    """Why `name`/`task` cannot be used (an env package or id that exists already), or None."""
    import clbench.envs
    from clbench.registry import clbench_env_ids

    for folder in clbench.envs.__path__:
        if (Path(folder) / task).exists():
            return f"an env package {Path(folder) / task} exists already"
    clash = [e for e in clbench_env_ids() if e.split("/")[-1].rsplit("-v", 1)[0].lower() == task]
    return f"env id {clash[0]} already uses the task name {task!r}" if clash else None


def render(template: str, name: str, task: str, env_id: str) -> str:
    text = (importlib.resources.files("clbench") / "templates" / "new_env" / template).read_text()
    return text.replace("{{Name}}", name).replace("{{task}}", task).replace("{{env_id}}", env_id)


def scaffold(name: str, root: Path) -> list[Path]:
    """Write the new task's files under `root`; refuse (ValueError) if any exists. Returns the paths."""
    task = check_name(name)
    env_id = f"clbench/{name}-v0"
    targets = {tmpl: root / rel.format(task=task) for tmpl, rel in FILES.items()}
    existing = [str(p) for p in targets.values() if p.exists()]
    if existing:
        raise ValueError("refusing to overwrite " + ", ".join(existing))
    texts = {tmpl: render(tmpl, name, task, env_id) for tmpl in targets}  # read every template first
    for tmpl, path in targets.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(texts[tmpl])
    return list(targets.values())


def cmd_new_env(args) -> int:
    task = check_name(args.name)
    env_id = f"clbench/{args.name}-v0"
    if args.root:
        root = Path(args.root).resolve()
    else:
        root = source_root()
        if root is None:
            raise ValueError("clbench is not running from a source checkout (no envs/, tasks/, agents/ next to "
                             "clbench/): pass --root DIR and put DIR on $CLBENCH_PATH")
    reason = taken(args.name, task)
    if reason:
        raise ValueError(f"cannot create {env_id}: {reason}")
    paths = scaffold(args.name, root)
    print(f"created {env_id} (task {task!r}) under {root}:")
    for path in paths:
        print(f"  {path.relative_to(root)}  ({len(path.read_text().splitlines())} lines)")
    repo = source_root()
    on_path = repo == root
    env_var = "" if on_path else f"CLBENCH_PATH={root} "
    tests = f"tests/test_{task}.py" if on_path else str(root / "tests" / f"test_{task}.py")
    if repo is not None and (repo / "tests" / "test_contract.py").is_file():  # the shared contract, every id
        tests += f" {'' if on_path else str(repo) + '/'}tests/test_contract.py -k {args.name}"
    print(f"""
next steps (docs/adding-an-environment.md; the contract: docs/contract.md):
  1. it runs as is: {env_var}clbench list   # shows {env_id}, uncalibrated
  2. replace the coin bandit with your task: envs/{task}/{task}_env.py (docstring, texts, hooks),
     tasks/{task}/default.yaml (every number), agents/{task}.py (reference, oracle), tests/test_{task}.py
  3. {env_var}clbench calibrate --env {env_id} --write   # r_max, r_reference into tasks/{task}/default.yaml
  4. {env_var}python -m pytest {tests}
  5. {env_var}clbench rollout --env {env_id} --agent reference   # the reference's gain from learning""")
    return 0


def register(sub) -> None:
    p = sub.add_parser("new-env", help="scaffold a new task (env, data, agents, tests, benchmark) that runs as is")
    p.add_argument("name", metavar="NAME", help="the env's CamelCase name, e.g. CoinBandit (id clbench/NAME-v0)")
    p.add_argument("--root", help="folder to write into, laid out like the repository (default: the source "
                                  "checkout clbench runs from); put it on $CLBENCH_PATH")
    p.set_defaults(func=cmd_new_env)
