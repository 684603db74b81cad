"""Per-instance accounting of the LLM agent's model calls, on top of the runner's `Usage`."""
from __future__ import annotations

from dataclasses import dataclass

from clbench.agent import Usage
from clbench.llm import CallUsage


@dataclass
class LLMUsage(Usage):
    """`Usage` plus what the report needs to show a memory system's footprint and faults.

    Totals (calls, prompt, completion, cached, reasoning, cost) include memory-update calls;
    `memory_*` says how much of them those calls were. `step_prompt` is the prompt size of the
    call that chose each action, in order; the record keeps its first and largest value
    (`context_first`, `context_max`), the memory's footprint at that instance: a bounded memory
    keeps it flat over the schedule, full context makes it grow. `faults` are model
    misbehaviours the run survived (empty replies, malformed tool calls, memory updates that
    failed or did not validate). Replies from the response cache count in tokens, cost nothing.
    """

    memory_calls: int = 0
    memory_prompt_tokens: int = 0
    memory_completion_tokens: int = 0
    cache_hits: int = 0
    retries: int = 0
    estimated_calls: int = 0

    def record(self, usage: CallUsage, *, memory: bool = False, from_cache: bool = False, retries: int = 0) -> None:
        self.add(Usage(calls=1, prompt_tokens=usage.prompt, completion_tokens=usage.completion,
                       cached_tokens=usage.cached, reasoning_tokens=usage.reasoning, cost=usage.cost))
        if memory:
            self.memory_calls += 1
            self.memory_prompt_tokens += usage.prompt
            self.memory_completion_tokens += usage.completion
        self.cache_hits += int(from_cache)
        self.retries += retries
        self.estimated_calls += int(usage.estimated)

    def tokens(self) -> dict[str, int]:
        """The runner's token totals plus the LLM details (stored in each result record; integers
        only, since reports sum every field)."""
        return {**super().tokens(), "calls": self.calls, "memory_calls": self.memory_calls,
                "memory_prompt": self.memory_prompt_tokens, "memory_completion": self.memory_completion_tokens,
                "cache_hits": self.cache_hits, "retries": self.retries, "estimated_calls": self.estimated_calls,
                "faults": len(self.faults), "context_first": self.step_prompt[0] if self.step_prompt else 0,
                "context_max": max(self.step_prompt, default=0)}
