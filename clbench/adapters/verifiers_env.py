"""clbench inside PrimeIntellect `verifiers` (v1 API, `pip install clbench[verifiers]`).

verifiers composes a run from plugins found by id: a *taskset* (config in, tasks out), an *env*
(how one task becomes one episode: `run(task, agents)` drives the agents) and a *harness* (the
program that talks to the model). This module is all three for clbench, exported via `__all__`
as verifiers' loader requires, under the plugin id `clbench-verifiers` (module alias
`clbench_verifiers`, registered in `sys.modules` when this module is imported, so that clbench
adds no top-level package to site-packages):

* `ClbenchTaskset` (`ClbenchTasksetConfig`: env_id, split="train", schedule, seeds, unit,
  instances, env_kwargs) yields one `ClbenchTask` per rollout: a clbench instance (unit
  "instance") or a whole stateful schedule ("schedule"). Tasks carry no prompt: the env opens
  the conversation with the instance's first observation; the system prompt is the spec card's
  brief, reward and action grammar.
* `ClbenchEnv.run()` is a multi-turn loop in the style of verifiers' TextArena env: the clbench
  env is the run's user. Each model reply is stepped as the action; the next observation is the
  next user turn; the instance's end ends the exchange. The rubric is clbench's own reward: the
  trace records `instance_reward` (weight 1; for a schedule, the mean instance reward) and, as
  metrics, each instance's reward, so `trace.reward` equals clbench's instance reward.
* `LocalChatHarness` is verifiers' `null` chat program run with the current Python, in the
  local subprocess runtime, instead of a uv-provisioned script (no download at run time). Pin
  any other harness/runtime through `ClbenchEnvConfig.player` as usual.

`load_environment(env_id, ...)` builds the env; `run_rollouts(env, base_url, model)` runs every
task of its taskset through verifiers' own episode machinery (`Env.serving()` + `run_slot`)
against any OpenAI-compatible endpoint and returns the episodes.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator

try:
    import verifiers.v1 as vf
    from verifiers.v1.configs.client import EvalClientConfig
    from verifiers.v1.dialects.chat import message_to_wire
    from verifiers.v1.env import RunSlot
    from verifiers.v1.harnesses.null.harness import NullHarness, NullHarnessConfig
    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
    from verifiers.v1.runtimes import SubprocessConfig
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError("clbench.adapters.verifiers_env needs verifiers>=0.4 (the v1 API): "
                      "pip install 'clbench[verifiers]'") from exc

from clbench.adapters.core import POOL, RolloutSpec, Session, rollout_specs, system_prompt

#: the id verifiers loads this module by (taskset, env and harness ids)
PLUGIN_ID = "clbench-verifiers"
MODULE_ALIAS = "clbench_verifiers"
__all__ = ["ClbenchTaskset", "ClbenchEnv", "LocalChatHarness"]
# set before the classes below: their default harness config is resolved by id at class creation
sys.modules[MODULE_ALIAS] = sys.modules[__name__]


# ---------------------------------------------------------------------------------- harness
class LocalChatHarnessConfig(NullHarnessConfig):
    pass


class LocalChatHarness(NullHarness):
    """verifiers' `null` chat loop (no tools, one model call per turn, resumed from the
    transcript on every later turn) run with this Python: nothing is provisioned or downloaded."""

    def __init__(self, config) -> None:
        super().__init__(config)
        self._files: dict[str, list[str]] = {}  # trace id -> conversation files written for the program

    async def setup(self, runtime) -> None:
        pass

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        script = _chat_program_path()
        system, prompt = self.resolve_prompt(data)
        args = [f"--base-url={endpoint}", f"--api-key={secret}", f"--model={ctx.model}"]
        if tool_interception_url:
            args.append(f"--tool-interception-url={tool_interception_url}")
        if system:
            args.append(f"--system-prompt={system}")
        if mcp_urls:
            args.append("--mcp-config=" + json.dumps({"mcpServers": {
                name: {"url": url, "timeout": self.config.tool_timeout} for name, url in mcp_urls.items()}}))
        path = None
        if isinstance(prompt, str):
            args.append(f"--prompt={prompt}")
        elif prompt is not None:  # every resumed turn: the conversation so far
            fd, path = tempfile.mkstemp(prefix=f"vf-initial-messages-{trace.id}-", suffix=".json")
            with os.fdopen(fd, "w") as fh:
                json.dump([message_to_wire(m) for m in prompt], fh)
            args.append(f"--initial-messages-file={path}")
        if path is not None:  # the program reads it after run_program returns: removed in cleanup()
            self._files.setdefault(trace.id, []).append(path)
        return await runtime.run_program([sys.executable, script, *args], {**self.config.resolved_env})

    async def cleanup(self, trace, runtime) -> None:
        for path in self._files.pop(trace.id, []):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        await super().cleanup(trace, runtime)


def _chat_program_path() -> str:
    digest = hashlib.sha256(CHAT_PROGRAM_SOURCE.encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"clbench-vf-chat-{digest}.py")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(CHAT_PROGRAM_SOURCE)
        os.replace(tmp, path)
    return path


# ---------------------------------------------------------------------------------- taskset
class ClbenchTasksetConfig(vf.TasksetConfig):
    env_id: str = "clbench/SpectrumMonitor-v6"
    split: str = "train"
    """"train" (default: instances from other seeds, never the benchmark's) or "test"."""
    schedule: str = "default"
    seeds: list[int] = [0]
    """Rollout seeds (instance order within variants; "schedule" rollouts: one per seed)."""
    unit: str = "instance"
    """"instance": one clbench instance per rollout; "schedule": a whole stateful schedule."""
    instances: list[str | int] | None = None
    """Only these instances (ids or positions); None: all."""
    env_kwargs: dict = {}


class ClbenchData(vf.TaskData):
    info: dict = {}
    """The rollout: env_id, split, schedule, seed, unit, instance_id, env_kwargs."""


class ClbenchTask(vf.Task[ClbenchData, vf.State, vf.TaskConfig]):
    pass


class ClbenchTaskset(vf.Taskset[ClbenchTask, ClbenchTasksetConfig]):
    def load(self) -> Iterator[ClbenchTask]:
        c = self.config
        specs = rollout_specs(c.env_id, split=c.split, schedule=c.schedule, seeds=c.seeds, unit=c.unit,
                              instances=c.instances, env_kwargs=c.env_kwargs)
        if not specs:
            return
        env = POOL.take(specs[0])
        try:
            system = system_prompt(env)
        finally:
            POOL.give(specs[0], env)
        for spec in specs:
            name = f"{spec.env_id}:{spec.split}:{spec.seed}:{spec.instance_id or spec.schedule}"
            yield ClbenchTask(ClbenchData(id=name, name=name, prompt=None, system_prompt=system,
                                          info=spec.to_dict()), c.task)


# ---------------------------------------------------------------------------------- env
class ClbenchEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(runtime=SubprocessConfig(),
                                            harness=LocalChatHarnessConfig(id=PLUGIN_ID))


class ClbenchEnv(vf.Env[ClbenchEnvConfig]):
    """One task = one clbench rollout; the clbench env plays the user (see the module docstring)."""

    async def run(self, task, agents) -> None:
        spec = RolloutSpec.from_dict(task.data.info)
        env = await asyncio.to_thread(POOL.take, spec)
        try:
            session = Session(spec, env)
            message = await asyncio.to_thread(session.start)
            async with agents.player.interaction(task) as interaction:
                while True:
                    segment = await interaction.turn(message)
                    if segment.terminated:  # the harness stopped (a limit, an error)
                        session.end_incomplete()
                        break
                    turn = await asyncio.to_thread(session.reply, segment.last_reply)
                    if turn.done:
                        break  # the instance (or schedule) ended: end the exchange
                    message = turn.observation
            trace = interaction.trace
            trace.record_reward("instance_reward", session.reward, 1.0)
            trace.info["clbench"] = session.summary()
        finally:
            POOL.give(spec, env)


# ---------------------------------------------------------------------------------- helpers
def load_environment(env_id: str = "clbench/SpectrumMonitor-v6", *, split: str = "train",
                     schedule: str = "default", seeds=(0,), unit: str = "instance", instances=None,
                     env_kwargs: dict | None = None, player: dict | None = None) -> ClbenchEnv:
    """A verifiers env over clbench rollouts (defaults: the train split, one rollout per instance)."""
    taskset = ClbenchTasksetConfig(id=PLUGIN_ID, env_id=env_id, split=split, schedule=schedule, seeds=list(seeds),
                                   unit=unit, instances=list(instances) if instances is not None else None,
                                   env_kwargs=dict(env_kwargs or {}))
    fields = {"taskset": taskset}
    if player is not None:
        fields["player"] = vf.AgentConfig(**player)
    return ClbenchEnv(ClbenchEnvConfig(**fields))


async def arun_rollouts(env: ClbenchEnv, base_url: str, model: str, *, api_key_var: str = "OPENAI_API_KEY",
                        max_concurrent: int = 4) -> list:
    """Every task of `env`'s taskset as one verifiers episode (`Env.serving()` + `Env.run_slot`,
    as verifiers' own eval runner does), against the OpenAI-compatible endpoint at `base_url`."""
    ctx = vf.ModelContext(model=model, client=EvalClientConfig(base_url=base_url, api_key_var=api_key_var))
    semaphore = asyncio.Semaphore(max_concurrent)
    async with env.serving():
        return list(await asyncio.gather(*(env.run_slot(RunSlot(task), ctx, semaphore) for task in env.taskset)))


def run_rollouts(env: ClbenchEnv, base_url: str, model: str, **kwargs) -> list:
    """`arun_rollouts` from synchronous code."""
    return asyncio.run(arun_rollouts(env, base_url, model, **kwargs))


def episode_rewards(episodes) -> dict[str, float]:
    """{instance id (or schedule name): clbench reward} of finished episodes."""
    out = {}
    for ep in episodes:
        for trace in ep.traces:
            info = trace.info.get("clbench") or {}
            spec = info.get("spec") or {}
            out[spec.get("instance_id") or spec.get("schedule", "?")] = float(trace.reward)
    return out
