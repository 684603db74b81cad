"""The LLM agent (`--agent llm`) and its interchangeable memory systems (`--memory NAME`)."""
from clbench.agents.llm.agent import LLMAgent
from clbench.agents.llm.memory import MEMORY_SYSTEMS, describe, memory_class

__all__ = ["LLMAgent", "MEMORY_SYSTEMS", "describe", "memory_class"]
