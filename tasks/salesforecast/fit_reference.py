"""Fit the stateless SalesForecastReference's factor for stores with no data of their own on the TRAIN split.

    python tasks/salesforecast/fit_reference.py     # prints UNSEEN for agents/salesforecast.py

Stateless, the reference's script (FORECAST_SCRIPT) sees one store's export: the other two stores' forecasts are
the visible store's level times `UNSEEN`. It is the grid value with the best mean reward (1 - WAPE, floored at 0,
per instance) of the stateless reference over every instance of the default schedule of the train split's own
world and train worlds 1-40 (`TRAIN_WORLDS`). The script runs once per instance with factor 1 (in process,
`run_script`), and each grid value scales its unseen stores' cells. No test-split world (canonical or fresh) is
used: tests/test_salesforecast.py checks that the constant reproduces from here.
"""
from __future__ import annotations

import json
import shlex
import tempfile
from pathlib import Path

import numpy as np

import clbench  # noqa: F401  registers the envs
from clbench.agents.salesforecast import SalesForecastReference, run_script
from clbench.envs.salesforecast.scoring import parse_predictions, skill, wape

TRAIN_WORLDS = (None, *range(1, 41))  # None: the train split's own world ("train-fyYYYY")
GRID = tuple(round(0.4 + 0.05 * i, 2) for i in range(17))  # 0.40 .. 1.20


def train_env(world_seed):
    """The registered SalesForecast env's train split in world `world_seed` (never the test split)."""
    from clbench.registry import env_class, env_id_for

    return env_class(env_id_for("salesforecast"))(split="train", world_seed=world_seed)


def instances(world_seed) -> list[tuple[dict, dict, str]]:
    """(the stateless reference's forecast with factor 1 on unseen stores, the realised units, the visible store)
    of every instance of a train world, in schedule order."""
    env = train_env(world_seed)
    assert env.split == "train"
    agent = SalesForecastReference(None, unseen=1.0)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for pos, slot in enumerate(env.schedule.order(0)):
            data = slot.instance.payload
            ws = Path(tmp) / f"ws{pos}"  # a fresh workspace: stateless
            for rel, text in data.files.items():
                (ws / rel).parent.mkdir(parents=True, exist_ok=True)
                (ws / rel).write_text(text)
            agent.begin_instance("", {"position": pos})
            command = next(c for c in agent.plan if c.startswith("python3 forecast.py"))
            run_script(ws, shlex.split(command)[2:])
            preds = parse_predictions(json.loads((ws / "predictions.json").read_text()), data.cells)
            out.append((preds, {c: env.world.sales[c] for c in data.cells}, data.store["id"]))
    return out


def scores(insts, grid=GRID) -> np.ndarray:
    """The mean reward over `insts` at each factor of `grid`."""
    return np.array([np.mean([skill(wape({c: u * (1.0 if c[1] == visible else f) for c, u in preds.items()}, actual))
                              for preds, actual, visible in insts]) for f in grid])


def fit(worlds=TRAIN_WORLDS) -> tuple[float, np.ndarray]:
    """The best grid factor over `worlds`' instances, and the mean reward at every grid value."""
    means = scores([x for w in worlds for x in instances(w)])
    return GRID[int(np.argmax(means))], means


if __name__ == "__main__":
    best, means = fit()
    print("  ".join(f"{f:.2f}: {m:.4f}" for f, m in zip(GRID, means)))
    print(f"UNSEEN = {best}")
