"""Poker's difficulty per world (issue 28/29 closing notes): one JSON line per world.

    python tasks/poker/measure_worlds.py c,1,2,3      # c: the canonical world; --full: the red team's full grids

Per world: r_max and r_reference (calibrated, cached), the reference's normalized gain and the drift cost
(`clbench drift-check`, 5 rollouts: one per deal), and the red team's verdict: each family's point chosen on
five held-out deals (5-9), its mean on the benchmark's five deals (and its margin over the reference there)
and over 40 other held-out deals (10-49) next to the reference's.
"""
from __future__ import annotations

import json
import sys

import clbench  # noqa: F401  registers the envs
from clbench import redteam
from clbench.agents.poker import STATELESS
from clbench.agents.poker_redteam import benchmark_deals, choose, held_out_deals, mean_over
from clbench.commands.drift_check import run_drift_check
from clbench.envs.poker.poker_env import PokerEnv

ENV = PokerEnv.env_id


def measure(world, full: bool = False) -> dict:
    base = PokerEnv(world_seed=world)
    rep = run_drift_check(ENV, {} if world is None else {"world_seed": world}, rollouts=base.deals)
    reference, bench_deals, held = STATELESS, benchmark_deals(base), held_out_deals(base, 2, 40)
    chosen = choose(base, redteam.families(PokerEnv), full=full)
    bench = {name: mean_over(base, p, bench_deals) for name, (_, p) in chosen.items()}
    expected = {name: mean_over(base, p, held) for name, (_, p) in chosen.items()}
    best, best_exp = max(bench, key=bench.get), max(expected, key=expected.get)
    return {"world": world, "r_max": rep["r_max"], "r_reference": rep["r_reference"],
            "gain": rep["normalized_gain"]["mean"], "gain_ci": rep["normalized_gain"]["ci"],
            "drift_cost": rep["drifts"][0]["cost"]["mean"],
            "rt_best": best, "rt_best_bench": bench[best], "rt_minus_ref": bench[best] - mean_over(base, reference, bench_deals),
            "rt_best_exp": best_exp, "rt_exp": expected[best_exp], "ref_exp": mean_over(base, reference, held),
            "styles": {k: v["style"] for k, v in base.opponent_specs.items()}}


if __name__ == "__main__":
    for w in sys.argv[1].split(","):
        print(json.dumps(measure(None if w == "c" else int(w), "--full" in sys.argv)), flush=True)
