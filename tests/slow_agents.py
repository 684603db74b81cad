"""Spectrum reference agents slowed down so a test can kill a run midway (used by test_scale)."""
import time

from clbench.agents.spectrummonitor import SpectrumReference


class SlowReference(SpectrumReference):
    def act(self, observation, info):
        time.sleep(0.01)
        return super().act(observation, info)


class SlowStatelessResume(SlowReference):
    """No state_dict: an interrupted stateful rollout must restart from its first instance."""

    def state_dict(self):
        return None
