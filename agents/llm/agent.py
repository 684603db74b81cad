"""The LLM agent: one model over any OpenAI-compatible endpoint, with an interchangeable memory.

Prompt at every step = system message (task brief, reward, how to act, the memory's context)
+ the memory's earlier conversation (if any) + this instance's transcript. Actions are native
tool calls when the endpoint takes `tools` (a call becomes the env action
`{"tool": name, "arguments": {...}}`), else the reply text in the env's grammar. With
tools="auto" an endpoint that rejects tools switches the agent to text for good. The env's
terminal observation (the score, its parts and the grader's feedback) arrives with
`end_instance` and is kept with the reward in the finished episode, so every memory system sees
it: the transcript memories show it, the others learn from it in their updates.

Failures: a call that fails after the client's retries raises `LLMCallError` from `act()`; the
runner records the instance as errored (an infrastructure error: metrics are not computed over
it, `--resume` plays it again) and its error policy decides whether the run goes on. An empty reply or a tool call
with malformed JSON is passed to the env, which answers with what was wrong (it shows in the
trajectory) and is counted as a fault. Memory updates are model calls too: their tokens and cost
count, and a failed one leaves the memory as it was (a fault, not an error). The update from an
instance runs when the next instance begins, so the stateless pass (a fresh agent per instance)
and the last instance of a rollout make no update calls that could never be used.

Transcripts: every model call is logged (messages exactly as sent, the raw reply and reasoning
text, the parsed action, tokens, latency, retries, errors), and every memory update with the
memory before and after; the runner takes the log per instance (`pop_transcript`) and stores it
compactly (clbench.llm.transcripts). `settings()` lists everything that shapes a result for the
run card; `default_system_name` names a run after its model and memory.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import math
import re
from typing import Any

import jsonschema
import numpy as np

from clbench.actions import as_tool_call, extract_json
from clbench.agent import Agent
from clbench.agents.llm.memory import memory_class
from clbench.agents.llm.memory.base import Episode
from clbench.agents.llm.usage import LLMUsage
from clbench.llm import ChatClient, ChatReply, ContextTooLong, LLMCallError, ToolsUnsupported
from clbench.llm.tokens import TokenCounter

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
#: agent-side memory tool calls allowed before an action must come
MAX_MEMORY_CALLS = 3


def reply_fault(reply: ChatReply) -> str | None:
    """Why a reply is not the model's whole answer, or None: it refused, it was cut off at max_tokens, or the
    endpoint's content filter withheld it."""
    if reply.refusal:
        return f"the model refused ({reply.refusal[:200]})"
    if reply.finish_reason == "length":
        return "reply cut off at max_tokens (finish_reason length)"
    if reply.finish_reason == "content_filter":
        return "reply withheld by the endpoint's content filter"
    return None


def strip_thinking(text: str) -> str:
    """Drop <think>...</think> blocks that some reasoning models put in the reply text."""
    return _THINK.sub("", text).strip()


def merge_user_turns(messages: list[dict]) -> list[dict]:
    """Join consecutive plain user messages (chat templates that require alternation reject runs)."""
    out: list[dict] = []
    for m in messages:
        if out and m["role"] == "user" and out[-1]["role"] == "user":
            out[-1] = {"role": "user", "content": f"{out[-1]['content']}\n\n{m['content']}"}
        else:
            out.append(dict(m))
    return out


_VALIDATORS: dict[str, Any] = {}


def _validator(schema: dict):
    """A validator per schema, checked and built once (`jsonschema.validate` re-checks the schema
    on every call, which cost more than the rest of a memory update)."""
    key = json.dumps(schema, sort_keys=True)
    if key not in _VALIDATORS:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        _VALIDATORS[key] = cls(schema)
    return _VALIDATORS[key]


class MemoryModel:
    """The model calls of memory systems, accounted in the agent's usage (see memory/base.py)."""

    def __init__(self, agent: "LLMAgent"):
        self.agent = agent
        self.brief = agent.card.brief
        self.count_messages = agent.tokens.messages  # the context budget's token count
        self.history_limit = agent.context_tokens - agent.max_tokens  # no carried history can be longer

    def ask(self, kind: str, instructions: str, material: str) -> str | None:
        system = (f"Memory task: {kind}\nYou maintain the memory of an agent that works through a sequence of "
                  f"instances of this task: {self.brief}\n\n{instructions}")
        try:
            reply = self.agent.call([{"role": "system", "content": system}, {"role": "user", "content": material}],
                                    tools=None, memory=True, purpose=f"memory:{kind}")
        except LLMCallError as exc:
            self.agent.usage.faults.append(f"memory update {kind} failed: {exc}")
            return None
        text = strip_thinking(reply.content)
        if not text:
            self.agent.usage.faults.append(f"memory update {kind}: empty reply")
        return text or None

    def ask_json(self, kind: str, instructions: str, material: str, schema: dict) -> dict | None:
        text = self.ask(kind, instructions, material)
        if text is None:
            return None
        obj = extract_json(text)
        error = jsonschema.exceptions.best_match(_validator(schema).iter_errors(obj))
        if error is not None:
            self.agent.usage.faults.append(f"memory update {kind}: reply does not validate ({error.message[:200]})")
            return None
        return obj

    def embed(self, texts: list[str]) -> list[list[float]] | None:
        model = getattr(self.agent.memory, "embedding_model", None)
        try:
            vectors, usage = self.agent.client.embed(texts, model)
        except LLMCallError as exc:
            self.agent.usage.faults.append(f"embedding failed: {exc}")
            return None
        self.agent.usage.record(usage, memory=True)
        return vectors


class LLMAgent(Agent):
    """An LLM over an OpenAI-compatible endpoint with a memory system (`memory=NAME`).

    Arguments: `memory` (see `clbench agents`), `memory_args` (dict of the memory's options),
    `model`, `base_url`, `api_key_env`, `temperature`, `max_tokens`, `cache_dir` (response cache),
    `max_concurrency` (calls in flight per endpoint and process), `timeout` (seconds per call),
    `max_retries`, `backoff` (first retry delay, doubled each time), `max_retry_wait` (the longest
    Retry-After honoured, seconds), `tools` ("auto", "native" or "text"), `context_tokens` (the
    prompt budget: system prompt + carried history + this instance + max_tokens stay within it;
    counted with the model's tokenizer when known, else estimated; `--context-tokens`), `prices`
    (extra price table: YAML path or mapping).
    """

    name = "llm"

    @classmethod
    def default_system_name(cls, kwargs: dict) -> str:
        """`llm-MEMORY-MODEL`: runs of different models or memories get different names."""
        model = str(kwargs.get("model") or "model").rsplit("/", 1)[-1]
        return f"llm-{kwargs.get('memory') or 'none'}-{model}"

    def __init__(self, card, seed: int = 0, latent: Any = None, memory: str = "none", model: str | None = None,
                 base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY", temperature: float | None = 0.0,
                 max_tokens: int = 2048, cache_dir: str | None = None, max_concurrency: int = 4,
                 timeout: float = 120.0, max_retries: int = 5, backoff: float = 1.0, tools: str = "auto",
                 context_tokens: int = 32768, prices: str | dict | None = None, memory_args: dict | None = None,
                 max_retry_wait: float = 300.0):
        super().__init__(card, seed=seed, latent=latent)
        if tools not in ("auto", "native", "text"):
            raise ValueError(f"tools must be auto, native or text, not {tools!r}")
        for name, value in (("max_tokens", max_tokens), ("context_tokens", context_tokens)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be a whole number of tokens, not {value!r}")
        if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                                        or not math.isfinite(temperature) or temperature < 0):
            raise ValueError(f"temperature must be a finite number >= 0 (or None: the endpoint's default), "
                             f"not {temperature!r}")
        if max_tokens < 1 or context_tokens <= max_tokens:
            raise ValueError("need max_tokens >= 1 and context_tokens > max_tokens")
        self.client = ChatClient(model, base_url=base_url, api_key_env=api_key_env, timeout=timeout,
                                 max_retries=max_retries, backoff=backoff, max_concurrency=max_concurrency,
                                 cache_dir=cache_dir, prices=prices, seed=seed, max_retry_wait=max_retry_wait)
        self.tokens = TokenCounter(model)
        self._log: list[dict] = []  # this instance's transcript entries (pop_transcript)
        self.temperature, self.max_tokens, self.context_tokens = temperature, int(max_tokens), int(context_tokens)
        self.native = tools != "text" and bool(card.tools)
        self.tools_option = tools
        self.memory_name = memory
        self.memory_args = dict(memory_args or {})
        self.memory = memory_class(memory)(MemoryModel(self), **self.memory_args)
        self.usage = LLMUsage()
        self._transcript: list[dict] = []
        self._steps: list[list[str]] = []
        self._header = ""
        self._context = ""
        self._instance_id = ""
        self._pending: Episode | None = None
        self._shocks = 0  # shocks applied (seeds partial-reset draws)
        self._probe: tuple[str, list[dict]] | None = None  # probe ladder for the next instance
        self._last_snapshot: str | None = None  # the memory as the last update left it (None: unknown)

    # ------------------------------------------------------------------ the runner's interface
    def begin_instance(self, observation: str, info: dict) -> None:
        self._learn()
        self._instance_id = info["instance_id"]
        self._header = f"Instance {info['position'] + 1} of {self.card.instances}: {info['instance_id']}"
        self._context = self.memory.context(observation)
        self._history_off = False
        self._apply_probe()
        self._transcript = [{"role": "user", "content": f"{self._header}\n{observation}"}]
        self._steps = []

    def act(self, observation: str, info: dict) -> str:
        if self._steps and self.memory.per_turn:  # a turn-level memory learns from the step just answered
            before = self._snapshot_before()
            self.memory.observe_step(self._instance_id, self._header, *self._steps[-1], observation)
            self._context = self.memory.context(observation)
            self._log.append({"kind": "memory_update", "episode": self._instance_id, "memory": self.memory_name,
                              "step": len(self._steps), "before": before, "after": self._snapshot_after()})
        if self._steps:  # the env's answer to the previous action
            last = self._transcript[-1]
            if last.get("tool_calls"):
                self._transcript.append({"role": "tool", "tool_call_id": last["tool_calls"][0]["id"],
                                         "content": observation})
            else:
                self._transcript.append({"role": "user", "content": observation})
        memory_calls = 0
        while True:
            memory_tools = self.memory.tools() if memory_calls < MAX_MEMORY_CALLS else []
            reply = self._step_call(memory_tools)
            action, message, internal = self._interpret(reply, {t["function"]["name"] for t in memory_tools})
            self._transcript.append(message)
            self._log[-1]["action"] = action if internal is None else None
            if internal is not None:
                self._log[-1]["memory_tool"] = {"name": internal[0], "arguments": internal[1]}
            if internal is None:
                self.usage.step_prompt.append(reply.usage.prompt)  # what the model saw when it chose
                break
            name, arguments, call_id = internal
            result = self.memory.call_tool(name, arguments)
            self._log[-1]["memory_tool"]["result"] = result
            self._transcript.append({"role": "tool", "tool_call_id": call_id, "content": result} if call_id
                                    else {"role": "user", "content": f"[{name} result]\n{result}"})
            memory_calls += 1
        self._steps.append([observation, action])
        return action

    def end_instance(self, reward: float, info: dict, observation: str = "") -> None:
        # the memory learns from this episode when the next instance begins: a stateless agent (one
        # instance, then discarded) and the last instance of a rollout pay for no useless update.
        # `observation` is the env's terminal feedback, kept with the reward.
        # a turn-level memory has seen every step but the last; it folds in that one and the outcome
        steps = self._steps[-1:] if self.memory.per_turn else self._steps
        self._pending = Episode(self._instance_id, self._header, steps, float(reward), info.get("raw_metric"),
                                feedback=observation or "")
        self._transcript, self._steps = [], []

    def _learn(self) -> None:
        if self._pending is not None:
            episode, self._pending = self._pending, None
            before = self._snapshot_before()
            self.memory.update(episode)
            self._log.append({"kind": "memory_update", "episode": episode.instance_id, "memory": self.memory_name,
                              "before": before, "after": self._snapshot_after()})

    def memory_snapshot(self) -> str:
        """The memory's whole state as text (what it can carry forward)."""
        return self.memory.snapshot()

    def _snapshot_before(self) -> str:
        """The memory before an update: the last update's snapshot unless a shock or a load came between."""
        return self._last_snapshot if self._last_snapshot is not None else self.memory_snapshot()

    def _snapshot_after(self) -> str:
        self._last_snapshot = self.memory_snapshot()
        return self._last_snapshot

    def pop_transcript(self) -> list[dict]:
        """This instance's model calls and memory updates, in order (the runner stores them)."""
        log, self._log = self._log, []
        return log

    def settings(self) -> dict:
        """Everything about this agent that shapes a result (the run card and report header show it)."""
        price, source = self.client.prices.lookup_with_source(self.client.model, self.client.base_url)
        return {"model": self.client.model, "base_url": self.client.base_url, "temperature": self.temperature,
                "max_tokens": self.max_tokens, "context_tokens": self.context_tokens,
                "token_count": self.tokens.method, "memory": self.memory_name, "memory_args": self.memory_args,
                "tools": self.tools_option, "timeout": self.client.timeout, "max_retries": self.client.max_retries,
                "max_retry_wait": self.client.max_retry_wait, "prompt_templates_sha256": self.prompt_hash(),
                "price": None if price is None else {"input": price.input, "output": price.output,
                                                     "cached_input": price.cached_input, "source": source}}

    def prompt_hash(self) -> str:
        """SHA-256 (first 16 hex digits) of the code that writes the prompts: the agent's system
        prompt and memory-task templates and the memory system's own instructions."""
        parts = [inspect.getsource(f) for f in (LLMAgent._system_prompt, MemoryModel.ask, LLMAgent._interpret)]
        parts.append(inspect.getsource(type(self.memory)))
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    def preflight(self) -> None:
        """One cheap call to the endpoint: a wrong key, model or URL fails here, before any job."""
        self.client.check()

    def probe(self, mode: str, facts: list[dict]) -> None:
        from clbench.probes import PROBE_MODES

        if mode not in PROBE_MODES:
            raise ValueError(f"probe mode must be one of {PROBE_MODES}, not {mode!r}")
        self._probe = (mode, list(facts))

    def _apply_probe(self) -> None:
        """P2: only the memory lines an oracle picks for the needed facts (context and carried
        history alike); P3: the gold facts next to the memory."""
        if self._probe is None:
            return
        from clbench.probes import select_lines

        mode, facts = self._probe
        if mode == "select":
            carried = "\n".join(str(m.get("content") or "") for m in self.memory.history(1 << 30))
            self._context = select_lines(f"{self._context}\n{carried}", facts)
            self._history_off = True
        else:
            gold = "\n".join(f"- {f['text']}" for f in facts)
            self._context = f"{self._context}\n\n## Verified facts for this instance\n{gold}".strip()
            self._history_off = False
        self._probe = None

    def pop_usage(self) -> LLMUsage:
        usage, self.usage = self.usage, LLMUsage()
        return usage

    def state_dict(self) -> dict:
        return {"memory": self.memory_name, "memory_state": self.memory.state_dict(), "native": self.native,
                "pending": self._pending.to_dict() if self._pending else None, "shocks": self._shocks}

    def load_state_dict(self, state: dict) -> None:
        if state["memory"] != self.memory_name:
            raise ValueError(f"state is for memory {state['memory']!r}, this agent uses {self.memory_name!r}")
        self.memory.load_state_dict(state["memory_state"])
        self._last_snapshot = None
        self.native = bool(state["native"])
        self._pending = Episode.from_dict(state["pending"]) if state.get("pending") else None
        self._shocks = int(state.get("shocks", 0))

    def memory_event(self, event: str, **params) -> None:
        """Lifecycle shocks (clbench.shocks): flush, partial-reset (fraction) and recompact."""
        if event not in ("flush", "partial-reset", "recompact"):
            super().memory_event(event, **params)
        self._shocks += 1
        self._last_snapshot = None  # the shock changes the memory outside an update
        if event == "flush":
            self._pending = None
            self.memory = memory_class(self.memory_name)(MemoryModel(self), **self.memory_args)
            return
        self._learn()  # the last instance is part of what the shock hits
        if event == "partial-reset":
            self.memory.forget(float(params.get("fraction", 0.5)), np.random.default_rng([self.seed, self._shocks]))
        else:
            self.memory.compact()

    # ------------------------------------------------------------------ model calls
    def call(self, messages: list[dict], tools: list[dict] | None, memory: bool = False,
             purpose: str = "act") -> ChatReply:
        """One accounted model call, logged for the transcript; failures are recorded in
        usage.errors and re-raised."""
        entry = {"kind": "call", "purpose": purpose, "messages": messages, "tools": tools or None,
                 "params": {"temperature": self.temperature, "max_tokens": self.max_tokens}}
        self._log.append(entry)
        try:
            reply = self.client.chat(messages, tools=tools or None, temperature=self.temperature,
                                     max_tokens=self.max_tokens)
        except LLMCallError as exc:
            entry.update(error=str(exc), attempt_errors=exc.attempt_errors, retries=max(0, exc.attempts - 1))
            if not memory and not isinstance(exc, ToolsUnsupported):
                self.usage.errors.append(str(exc))
            raise
        u = reply.usage
        entry.update(reply={"content": reply.content, "reasoning": reply.reasoning or None,
                            "tool_calls": [vars(c) for c in reply.tool_calls] or None,
                            "finish_reason": reply.finish_reason, "refusal": reply.refusal or None},
                     usage={"prompt": u.prompt, "completion": u.completion, "cached": u.cached,
                            "reasoning": u.reasoning, "cost": u.cost, "estimated": u.estimated},
                     latency=reply.latency, retries=reply.retries, attempt_errors=reply.attempt_errors or None,
                     from_cache=reply.from_cache)
        self.usage.record(reply.usage, memory=memory, from_cache=reply.from_cache, retries=reply.retries)
        fault = reply_fault(reply)
        if fault:  # a reply that is not the model's whole answer is used, and said so (record, card, report)
            entry["fault"] = fault
            self.usage.faults.append(f"{purpose} call: {fault}")
        return reply

    def _step_call(self, memory_tools: list[dict]) -> ChatReply:
        while True:
            system = self._system_prompt(memory_tools)
            tools = (list(self.card.tools) + memory_tools) if self.native else None
            fixed = self.tokens.messages([system, *self._transcript]) + (self.tokens.count(json.dumps(tools)) if tools else 0)
            if fixed + self.max_tokens > self.context_tokens:  # no history left to drop: the instance itself
                raise ContextTooLong(f"the prompt without carried history ({fixed} tokens: system prompt and this "
                                     f"instance's turns) and max_tokens {self.max_tokens} exceed --context-tokens "
                                     f"{self.context_tokens}: the instance ends here, as the agent's loss")
            history = [] if getattr(self, "_history_off", False) else \
                self.memory.history(max(0, self.context_tokens - self.max_tokens - fixed))
            messages = [system, *merge_user_turns(history + self._transcript)]
            try:
                reply = self.call(messages, tools)
            except ToolsUnsupported as exc:
                if self.tools_option == "native":
                    self.usage.errors.append(str(exc))
                    raise
                self.native = False  # the endpoint has no tool calling: use the text grammar from now on
                continue
            return reply

    def _system_prompt(self, memory_tools: list[dict]) -> dict:
        card = self.card
        parts = ["You are an agent working through a sequence of instances of one task, one after another. "
                 "What you learn in one instance may help in later ones.",
                 f"Task: {card.brief}", f"Reward: {card.reward}"]
        if self.native:
            parts.append("Act by calling exactly one tool per reply; the tool result is the environment's "
                         f"observation. (Text replies are read with this grammar: {card.action_grammar})")
        else:
            parts.append(f"Reply with exactly one action per message. {card.action_grammar}")
            if memory_tools:
                listing = "; ".join(f"{t['function']['name']}({', '.join(t['function']['parameters']['properties'])}): "
                                    f"{t['function']['description']}" for t in memory_tools)
                parts.append('Memory tools (reply with {"tool": NAME, "arguments": {...}} to use one before your '
                             f"action; it is not an action): {listing}")
        if self._context:
            parts.append(f"## Memory\n{self._context}")
        return {"role": "system", "content": "\n\n".join(parts)}

    def _interpret(self, reply: ChatReply, memory_tools: set[str]):
        """(action for the env, assistant message for the transcript, internal memory call or None)."""
        text = strip_thinking(reply.content)
        if reply.tool_calls:
            tc = reply.tool_calls[0]
            message = {"role": "assistant", "content": reply.content or None,
                       "tool_calls": [{"id": tc.id, "type": "function",
                                       "function": {"name": tc.name, "arguments": tc.arguments}}]}
            try:
                args = json.loads(tc.arguments) if tc.arguments.strip() else {}
            except json.JSONDecodeError:
                args = None
            if not isinstance(args, dict):
                self.usage.faults.append(f"tool call {tc.name!r} with malformed arguments")
                return json.dumps({"tool": tc.name, "arguments": tc.arguments}), message, None
            if tc.name in memory_tools:
                return "", message, (tc.name, args, tc.id)
            return json.dumps({"tool": tc.name, "arguments": args}), message, None
        message = {"role": "assistant", "content": reply.content}
        if not text:
            self.usage.faults.append("empty reply")
        elif memory_tools:
            try:
                call = as_tool_call(extract_json(text))
            except ValueError:
                call = None
            if call is not None and call.tool in memory_tools:
                return "", message, (call.tool, call.arguments, None)
        return text, message, None
