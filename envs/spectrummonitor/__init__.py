"""Blind spectrum monitoring: keep a running map of occupied channels from noisy scans."""

REGISTRATIONS = [
    {"id": "clbench/SpectrumMonitor-v6", "entry_point": "clbench.envs.spectrummonitor.spectrummonitor_env:SpectrumMonitorEnv"},
]
