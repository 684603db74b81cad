"""Facts of the upstream release that concern systems, not one task (paper Table 1)."""
from __future__ import annotations

#: the system whose stateless baseline is the external reference of normalized reward
REFERENCE_SYSTEM = "icl-gpt-5.4"
DISPLAY_NAMES = {
    "icl-gpt-5.4": "ICL GPT-5.4",
    "icl-claude-sonnet-4.6": "ICL Sonnet 4.6",
    "mem0-gpt-5.4": "Mem0 GPT-5.4",
    "claude-code-sonnet-4.6": "Claude Code Sonnet 4.6",
}
#: Paper Table 1: system -> (normalized reward %, normalized gain %), mean over the six tasks.
PUBLISHED_AGGREGATE = {
    "icl-claude-sonnet-4.6": (22.3, 25.4),
    "claude-code-sonnet-4.6": (19.0, 23.9),
    "mem0-gpt-5.4": (15.1, 20.2),
    "icl-gpt-5.4": (20.1, 20.1),
}
