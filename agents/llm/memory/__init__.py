"""Memory systems of the LLM agent, by name (`--memory NAME`). See base.py for the hooks."""
from __future__ import annotations

from clbench.agent import load_object

MEMORY_SYSTEMS = {
    "none": "clbench.agents.llm.memory.base:Memory",
    "icl": "clbench.agents.llm.memory.icl:InContextMemory",
    "notepad": "clbench.agents.llm.memory.notepad:NotepadMemory",
    "retrieval": "clbench.agents.llm.memory.retrieval:RetrievalMemory",
    "playbook": "clbench.agents.llm.memory.playbook:PlaybookMemory",
    "acc": "clbench.agents.llm.memory.acc:CognitiveCompressorMemory",
    "truncation": "clbench.agents.llm.memory.truncation:TruncationMemory",
    "sliding-summary": "clbench.agents.llm.memory.sliding_summary:SlidingSummaryMemory",
    "memory-bank": "clbench.agents.llm.memory.memory_bank:MemoryBankMemory",
    "file-state": "clbench.agents.llm.memory.file_state:FileStateMemory",
}


def memory_class(name: str):
    if name not in MEMORY_SYSTEMS:
        raise ValueError(f"unknown memory system {name!r}; available: {', '.join(MEMORY_SYSTEMS)}")
    return load_object(MEMORY_SYSTEMS[name])


def describe() -> dict[str, str]:
    """name -> one-line description of every memory system."""
    return {name: memory_class(name).description for name in MEMORY_SYSTEMS}
