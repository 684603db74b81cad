"""CL-Bench v1.0 counterpart of DBExplore: upstream's database_exploration (see clbench.upstream).

Rewards are re-derived from the regret (the raw metric) as ``max(0, 1 - regret/15)``, under both
upstream's and clbench's scoring.
"""
from clbench.upstream.task import UpstreamTask

REGRET_SCALE = 15.0


def reward(outcome: dict) -> float | None:
    """``max(0, 1 - regret/15)`` from the raw metric; None when the outcome has no regret."""
    if outcome.get("raw_metric_value") is None:
        return None
    return max(0.0, 1.0 - float(outcome["raw_metric_value"]) / REGRET_SCALE)


def variant(iid: str, outcome: dict, doc: dict) -> str:
    """Questions 1-20 precede the schema migration, 101-120 follow it (rollouts permute each block)."""
    return "pre-migration" if int(iid) < 100 else "post-migration"


UPSTREAM = UpstreamTask(
    name="database_exploration",
    r_max=1.0,
    unit="query-efficiency score 0-1",
    variant=variant,
    upstream_reward=reward,
    published={"claude-code-sonnet-4.6": (22.053, 1.182, 13.853),
               "mem0-gpt-5.4": (17.240, 1.300, 12.907)},
)
