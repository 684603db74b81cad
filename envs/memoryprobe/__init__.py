"""Long-conversation memory probe: recall facts planted across the sessions of one assistant chat."""

REGISTRATIONS = [
    {"id": "clbench/MemoryProbe-v2", "entry_point": "clbench.envs.memoryprobe.memoryprobe_env:MemoryProbeEnv"},
]
