"""One stateful rollout played directly (no run directory), keeping per session what the memory
diagnostics need: the question outcomes, the reward, and the memory's size after the session.

    from clbench.diagnostics.play import play_rollout
    sessions = play_rollout("clbench/MemoryProbe-v2", "file-state", shocks=["flush@12"])

Deterministic for the scripted strategies. `probe` plays a probe-ladder rung (None, "select",
"gold"); `shocks` are lifecycle shocks "EVENT@K" as `clbench rollout --shock` takes them.
"""
from __future__ import annotations


def play_rollout(env_id: str, agent: str, env_kwargs: dict | None = None, seed: int = 0,
                 shocks: list[str] | None = None, probe: str | None = None,
                 agent_kwargs: dict | None = None) -> list[dict]:
    from clbench.agent import make_agent
    from clbench.probes import gold_facts
    from clbench.runner import make_env, play_instance
    from clbench.shocks import apply_shocks

    env = make_env(env_id, **(env_kwargs or {}))
    try:
        base = env.unwrapped
        a = make_agent(agent, env, seed=seed, **(agent_kwargs or {}))
        specs = list(shocks or [])
        out = []
        obs, info = env.reset(seed=seed)
        for pos in range(len(base.schedule)):
            if pos:
                obs, info = env.reset()
            events = apply_shocks(a, specs, pos)
            if probe:
                a.probe(probe, gold_facts(env, info["instance_id"]))
            session_tokens = getattr(base.slot.instance.payload, "tokens", None)
            traj: list[dict] = []
            result = play_instance(env, a, obs, info, traj)
            actions = [e["action"] for e in traj if e.get("event") == "step"]
            if result["error"]:
                raise RuntimeError(f"{agent} failed at position {pos}: {result['error']}")
            details = result.get("details") or {}
            memory = a.memory_tokens() if hasattr(a, "memory_tokens") else None
            context = getattr(a, "context_tokens", memory)
            if not isinstance(context, (int, type(None))):  # an LLM agent's context window setting
                context = None
            prompts = result.get("step_prompt_tokens") or []  # model-backed agents: prompt tokens per call
            out.append({"position": pos, "instance_id": info["instance_id"], "variant": info["variant"],
                        "reward": result["reward"], "outcomes": details.get("question_outcomes") or [],
                        "memory_tokens": memory, "context_tokens": context, "session_tokens": session_tokens,
                        "prompt_tokens": max(prompts) if prompts else None,
                        "action": actions[-1] if actions else "",
                        "shocks": [e["event"] for e in events]})
        return out
    finally:
        env.close()
