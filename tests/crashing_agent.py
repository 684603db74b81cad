"""An agent that raises on its third instance (used by test_core)."""
from clbench.agents.spectrummonitor import SpectrumReference


class CrashOnThird(SpectrumReference):
    def begin_instance(self, observation, info):
        self.count = getattr(self, "count", 0) + 1
        if self.count == 3:
            raise RuntimeError("boom")
