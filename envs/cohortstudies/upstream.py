"""CL-Bench v1.0 counterpart of CohortStudies: upstream's cohort_studies (see clbench.upstream).

The trace outcomes (which the published numbers use) hold the older clamped skill score
``max(0, 1 - KL/KL_ref)`` although cohort's r_max is in signed bits; clbench rescores each outcome
as the signed information gain in bits from its metadata, ``(mean_reference_kl -
mean_kl_divergence) / ln 2`` (KL in nats). That equals the rescoring stored in each file's
``summary`` to 1e-6, and the oracle (KL = 0) scores ``mean_reference_kl / ln 2``, whose mean over
the 20 instances is the published r_max 0.162202.
"""
import math

from clbench.upstream.task import UpstreamTask


def signed_bits(outcome: dict) -> float | None:
    """Information gain over the reference in bits, when the metadata has both KLs (nats)."""
    meta = outcome.get("metadata") or {}
    ref, kl = meta.get("mean_reference_kl"), meta.get("mean_kl_divergence")
    if ref is None or kl is None:
        return None
    return (float(ref) - float(kl)) / math.log(2)


def variant(iid: str, outcome: dict, doc: dict) -> str:
    """The study the instance comes from."""
    return outcome["metadata"]["study_name"]


UPSTREAM = UpstreamTask(
    name="cohort_studies",
    r_max=0.162202,
    unit="bits",
    variant=variant,
    clbench_reward=signed_bits,
    clbench_reward_source="signed_bits",
)
