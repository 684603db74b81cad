"""Token counts for the context budget: a real tokenizer where the model's is known, else an estimate.

OpenAI models use tiktoken's encodings (o200k_base for gpt-4o / gpt-4.1 / gpt-5 / o-series,
cl100k_base for gpt-4 and gpt-3.5). They are loaded through `bpe-openai`, which implements the
tiktoken encodings and ships their data, so counting works offline (tiktoken itself downloads
the encoding files on first use). Any other model gets the estimate of 4 characters a token.
`TokenCounter.method` says which one a run used; the run card shows it.
"""
from __future__ import annotations

import math
from functools import lru_cache

#: model-name prefixes (after any "provider/" part) -> tiktoken encoding, most specific first
ENCODINGS = (("gpt-4o", "o200k_base"), ("chatgpt-4o", "o200k_base"), ("gpt-4.1", "o200k_base"),
             ("gpt-4.5", "o200k_base"), ("gpt-5", "o200k_base"), ("o1", "o200k_base"), ("o3", "o200k_base"),
             ("o4", "o200k_base"), ("gpt-oss", "o200k_base"), ("gpt-4", "cl100k_base"),
             ("gpt-3.5", "cl100k_base"), ("text-embedding-3", "cl100k_base"))
ESTIMATE = "estimate (4 characters a token)"


def estimate_tokens(text: str) -> int:
    """Rough token count (4 characters a token) for budgets and endpoints that report no usage."""
    return math.ceil(len(text) / 4)


def encoding_name(model: str | None) -> str | None:
    name = (model or "").lower().rsplit("/", 1)[-1]
    return next((enc for prefix, enc in ENCODINGS if name.startswith(prefix)), None)


@lru_cache(maxsize=None)
def _encoding(name: str):
    import bpe_openai

    return bpe_openai.get_encoding(name)


class TokenCounter:
    """`count(text)`: tokens of `text` for `model`; `method` names the tokenizer or the estimate."""

    def __init__(self, model: str | None):
        enc = encoding_name(model)
        self._enc = None
        if enc is not None:
            try:
                self._enc = _encoding(enc)
            except Exception:  # bpe-openai missing or broken: the estimate, and the run card says so
                self._enc = None
        self.method = f"tiktoken {enc} (via bpe-openai)" if self._enc is not None else ESTIMATE
        self._cached = lru_cache(maxsize=4096)(self._count)  # history messages recur at every step

    def _count(self, text: str) -> int:
        return len(self._enc.encode(text, disallowed_special=())) if self._enc is not None else estimate_tokens(text)

    def count(self, text: str) -> int:
        return self._cached(text) if text else 0

    def messages(self, messages: list[dict]) -> int:
        """Prompt tokens of chat messages (content, tool-call arguments, 4 tokens a message)."""
        total = 0
        for m in messages:
            total += 4 + self.count(m.get("content") or "")
            for call in m.get("tool_calls") or []:
                total += self.count(call["function"]["name"] + call["function"]["arguments"])
        return total
