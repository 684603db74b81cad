"""Checking a predictions submission and scoring it with WAPE skill."""
from __future__ import annotations

import math
from typing import Any

from clbench.actions import ActionError

Cell = tuple[str, str, int]
EXAMPLE = '{"predictions": [{"product_id": "P01", "store": "SF", "year": 2027, "units": 12.5}, ...]}'


def _cell_text(cell: Cell) -> str:
    return f"({cell[0]}, {cell[1]}, {cell[2]})"


def parse_predictions(obj: Any, cells: tuple[Cell, ...]) -> dict[Cell, float]:
    """Predictions for exactly `cells` from a decoded submission; ActionError says what is wrong."""
    if isinstance(obj, dict) and "predictions" in obj:
        obj = obj["predictions"]
    if not isinstance(obj, list):
        raise ActionError(f"the submission must be a JSON object with a \"predictions\" list, e.g. {EXAMPLE}")
    wanted = set(cells)
    preds: dict[Cell, float] = {}
    duplicates, unexpected = [], []
    for i, item in enumerate(obj):
        if not isinstance(item, dict):
            raise ActionError(f"prediction {i} is not an object; each needs product_id, store, year, units")
        try:
            cell = (str(item["product_id"]), str(item["store"]), int(item["year"]))
            units = item["units"]
        except (KeyError, TypeError, ValueError):
            raise ActionError(f"prediction {i}: needs product_id, store, year (integer) and units; "
                              f"got {sorted(item)[:6]}") from None
        if isinstance(units, bool) or not isinstance(units, (int, float)) or not math.isfinite(units) or units < 0:
            raise ActionError(f"prediction {i} {_cell_text(cell)}: units must be a finite number >= 0, got {units!r}")
        if cell not in wanted:
            unexpected.append(cell)
        elif cell in preds:
            duplicates.append(cell)
        preds[cell] = float(units)
    missing = [c for c in cells if c not in preds]
    problems = []
    for label, bad in (("missing", missing), ("not requested", unexpected), ("duplicated", duplicates)):
        if bad:
            more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
            problems.append(f"{len(bad)} {label}: " + ", ".join(_cell_text(c) for c in bad[:5]) + more)
    if problems:
        raise ActionError(f"the submission must hold exactly the {len(cells)} requested cells "
                          f"(inbox/request.json); " + "; ".join(problems))
    return preds


def wape(preds: dict[Cell, float], actual: dict[Cell, int]) -> float:
    """Weighted absolute percentage error: sum |pred - actual| / sum actual over the cells."""
    total = sum(actual.values())
    err = sum(abs(preds.get(c, 0.0) - a) for c, a in actual.items())
    return err / total if total > 0 else (0.0 if err == 0 else math.inf)


def skill(w: float) -> float:
    """The reward: 1 - WAPE floored at 0, so one wild forecast cannot dominate a task's mean."""
    return max(0.0, 1.0 - w)
