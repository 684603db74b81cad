"""Spectrum reference agents slowed down so a test can kill a run midway (used by test_scale)."""
import os
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


class LosesOneInstanceOnce(SpectrumReference):
    """Loses the instance at schedule position `at` to an infrastructure error the first time any process
    plays it (the file `marker` says it did): an endpoint that failed once, then came back."""

    def __init__(self, card, seed: int = 0, latent=None, marker: str = "", at: int = 6, **kwargs):
        super().__init__(card, seed=seed, latent=latent, **kwargs)
        self.marker, self.at = marker, int(at)

    def begin_instance(self, observation, info):
        super().begin_instance(observation, info)
        if info["position"] == self.at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise InfrastructureError("the endpoint failed for good")


class InfrastructureError(RuntimeError):
    infrastructure = True
