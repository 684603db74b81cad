"""Model access for LLM agents: any OpenAI-compatible chat-completions endpoint.

    from clbench.llm import ChatClient
    client = ChatClient("gpt-4o-mini", base_url=None, cache_dir="~/.cache/clbench/llm")
    reply = client.chat([{"role": "user", "content": "hi"}], max_tokens=16)
    reply.content, reply.usage.prompt, reply.usage.cost

Prices live in clbench/data/prices.yaml and can be extended by the user (see prices.py).
"""
from clbench.llm.cache import ResponseCache, request_key
from clbench.llm.client import (CallUsage, ChatClient, ChatReply, ContextTooLong, LLMCallError, ToolCallReply,
                                ToolsUnsupported, estimate_tokens, messages_tokens, retry_after)
from clbench.llm.prices import Price, PriceTable

__all__ = ["CallUsage", "ChatClient", "ChatReply", "ContextTooLong", "LLMCallError", "Price", "PriceTable", "ResponseCache",
           "ToolCallReply", "ToolsUnsupported", "estimate_tokens", "messages_tokens", "request_key", "retry_after"]
