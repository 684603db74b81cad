"""CL-Bench v1.0 counterpart of SpectrumMonitor: upstream's blind_spectrum_monitoring (see clbench.upstream)."""
from clbench.upstream.task import UpstreamTask


def variant(iid: str, outcome: dict, doc: dict) -> str:
    """The scenario named in the instance id (``<task>:<scenario>:...``)."""
    return iid.split(":")[1]


UPSTREAM = UpstreamTask(
    name="blind_spectrum_monitoring",
    r_max=1.0,
    unit="IoU",
    variant=variant,
    published={"icl-gpt-5.4": (46.198, 1.001, 26.437),
               "claude-code-sonnet-4.6": (44.282, 1.449, 24.522),
               "icl-claude-sonnet-4.6": (36.584, 1.262, 16.825)},
)
