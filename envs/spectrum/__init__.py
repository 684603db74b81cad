"""Blind spectrum monitoring: keep a running map of occupied channels from noisy scans."""

REGISTRATIONS = [
    {"id": "clbench/SpectrumMonitor-v1", "entry_point": "clbench.envs.spectrum.spectrum_monitor:SpectrumMonitorEnv"},
]
