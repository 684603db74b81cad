"""CL-Bench v1.0 counterpart of SalesForecast: upstream's sales_prediction (see clbench.upstream)."""
from clbench.upstream.task import UpstreamTask


def stages(doc: dict) -> dict[int, str]:
    """target_year -> stage, from a rollout's instance history (upstream scores sales in stages)."""
    for rt in doc.get("run_traces") or []:
        history = (((rt.get("trace") or {}).get("result") or {}).get("metrics") or {}).get("instance_history")
        if history:
            return {int(h["target_year"]): f"stage{h['stage_idx']}" for h in history}
    return {}


def variant(iid: str, outcome: dict, doc: dict) -> str:
    """The stage of the instance's target year."""
    return stages(doc)[int(outcome["metadata"]["target_year"])]


UPSTREAM = UpstreamTask(
    name="sales_prediction",
    r_max=1.0,
    unit="WAPE skill 0-1",
    variant=variant,
    published={"icl-claude-sonnet-4.6": (10.018, 0.215, 4.840)},
)
