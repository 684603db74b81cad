"""CL-Bench v1.0 counterpart of CodeRepair: upstream's codebase_adaptation (see clbench.upstream)."""
from clbench.upstream.task import UpstreamTask


def variant(iid: str, outcome: dict, doc: dict) -> str:
    """The repository: the instance id without its trailing ``-<issue number>``."""
    return iid.rsplit("-", 1)[0]


UPSTREAM = UpstreamTask(
    name="codebase_adaptation",
    r_max=1.0,
    unit="step-efficiency score 0-1",
    variant=variant,
    published={"mem0-gpt-5.4": (11.105, 1.100, 2.980),
               "icl-gpt-5.4": (10.140, 1.959, 0.690)},
)
