"""`clbench agents`: the agents of every env and the LLM agent's memory systems."""
from __future__ import annotations


def scripted_agents() -> list[tuple[str, str]]:
    """(env id, comma-separated scripted agents) for every registered env, without building its data."""
    from clbench.registry import clbench_env_ids, env_class

    rows = []
    for env_id in clbench_env_ids():
        try:
            cls = env_class(env_id)
            rows.append((env_id, ", ".join(sorted(cls.agents)) or "-"))
        except Exception as exc:  # an env whose module cannot load is still listed
            rows.append((env_id, f"unavailable: {type(exc).__name__}: {exc}"))
    return rows


def cmd_agents(args) -> int:
    from clbench.agent import GENERIC_AGENTS
    from clbench.agents.llm import describe
    from clbench.reporting.tables import markdown_table

    print("Agents for every env: " + ", ".join(sorted(GENERIC_AGENTS)) + "\n")
    print("Memory systems of the llm agent (--agent llm --memory NAME):\n")
    print(markdown_table(["memory", "description"], [[name, text] for name, text in describe().items()]))
    print("\nScripted agents per env (--agent NAME):\n")
    print(markdown_table(["env", "agents"], [list(r) for r in scripted_agents()]))
    return 0


def register(sub) -> None:
    p = sub.add_parser("agents", help="list the agents of every env and the LLM agent's memory systems")
    p.set_defaults(func=cmd_agents)
