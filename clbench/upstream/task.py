"""What one upstream task is: the facts an env package declares in its ``upstream.py``.

An env package whose domain has a CL-Bench v1.0 counterpart holds a small ``upstream.py`` that
defines ``UPSTREAM = UpstreamTask(...)``; `clbench.upstream.mappings` finds it through the
registry. The env packages import this module, so it imports nothing beyond the standard library.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

#: instance id, its outcome, the whole task document -> variant name
VariantRule = Callable[[str, dict, dict], str]
#: an outcome -> a reward, or None to fall back to the default (the outcome's own ``reward``)
Scoring = Callable[[dict], "float | None"]


@dataclass(frozen=True)
class UpstreamTask:
    """One upstream task and how clbench reads its result files.

    name: the upstream task name (e.g. ``exploitable_poker``); r_max: its published maximum per
    instance; unit: the unit of its reward. variant: recovers an instance's variant (see
    `clbench.upstream.convert.recover_variants`); None gives one variant ``all``.
    upstream_reward: how the paper's numbers read an outcome's reward, when not its ``reward``.
    clbench_reward: clbench's own scoring of an outcome, when it differs, labelled
    clbench_reward_source in the records. published: paper appendix B.4, system -> (cumulative
    reward, its standard error, cumulative gain), native scale. external: the external reference
    (the reference system's stateless baseline sum) when it was published without an artifact.
    env_id: the clbench counterpart; discovery fills it from the package's REGISTRATIONS (set it
    only to choose among several); module: filled by discovery.
    """

    name: str
    r_max: float
    unit: str
    variant: VariantRule | None = None
    upstream_reward: Scoring | None = None
    clbench_reward: Scoring | None = None
    clbench_reward_source: str = "upstream"
    published: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)
    external: float | None = None
    env_id: str | None = None
    module: str | None = None

    def __post_init__(self):
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"UpstreamTask needs the upstream task name, got {self.name!r}")
        if not isinstance(self.r_max, (int, float)) or self.r_max <= 0:
            raise ValueError(f"UpstreamTask {self.name}: r_max must be a positive number, got {self.r_max!r}")
        if not self.unit or not isinstance(self.unit, str):
            raise ValueError(f"UpstreamTask {self.name}: unit must name the reward unit, got {self.unit!r}")
        for system, row in self.published.items():
            if len(row) != 3:
                raise ValueError(f"UpstreamTask {self.name}: published[{system!r}] must be "
                                 "(cumulative reward, standard error, cumulative gain)")
