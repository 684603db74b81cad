"""CL-Bench v1.0 counterpart of Poker: upstream's exploitable_poker (see clbench.upstream).

The reference system's (icl-gpt-5.4) poker artifact is missing: its baseline sum, the external
reference, is the published 133.6, and its own poker row comes from its manifest headline.
"""
from clbench.upstream.task import UpstreamTask


def variant(iid: str, outcome: dict, doc: dict) -> str:
    """``poker:<opponent>:hand:stage<k>_seed<s>_hand<h>`` -> ``stage<k>-<opponent>``: an opponent
    recurs in later stages, so the stage keeps every block's name unique."""
    parts = iid.split(":")
    return f"{parts[3].split('_')[0]}-{parts[1]}"


UPSTREAM = UpstreamTask(
    name="exploitable_poker",
    r_max=9.4875,
    unit="BB per hand",
    variant=variant,
    published={"claude-code-sonnet-4.6": (343.020, 29.367, 58.520)},
    external=133.6,
)
