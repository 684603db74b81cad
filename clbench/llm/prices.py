"""Model prices ($ per million tokens) and the cost of one call.

The built-in table is clbench/data/prices.yaml; users extend or override it with YAML files of
the same layout (see that file's header). An unknown model has no price: its cost is None.
"""
from __future__ import annotations

import importlib.resources
import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

PRICES_ENV = "CLBENCH_PRICES"
_DATE_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")


@dataclass(frozen=True)
class Price:
    input: float
    output: float
    cached_input: float

    def cost(self, prompt: int, completion: int, cached: int = 0) -> float:
        cached = min(max(cached, 0), prompt)
        return ((prompt - cached) * self.input + cached * self.cached_input + completion * self.output) / 1e6


def _parse(models: dict, source: str) -> dict[str, Price]:
    if not isinstance(models, dict):
        raise ValueError(f"{source}: 'models' must map model names to prices")
    table = {}
    for name, entry in models.items():
        if not isinstance(entry, dict) or "input" not in entry or "output" not in entry:
            raise ValueError(f"{source}: model {name!r} needs 'input' and 'output' ($ per million tokens)")
        try:
            inp, out = float(entry["input"]), float(entry["output"])
            cached = float(entry.get("cached_input", inp))
        except (TypeError, ValueError):
            raise ValueError(f"{source}: model {name!r}: prices must be numbers") from None
        if min(inp, out, cached) < 0:
            raise ValueError(f"{source}: model {name!r}: prices must be >= 0")
        table[str(name).lower()] = Price(inp, out, cached)
    return table


def _read(path: Path) -> dict[str, Price]:
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping with 'models'")
    return _parse(data.get("models", {}), str(path))


@cache
def _builtin() -> dict[str, Price]:
    path = importlib.resources.files("clbench") / "data" / "prices.yaml"
    return _parse((yaml.safe_load(path.read_text()) or {}).get("models", {}), "clbench/data/prices.yaml")


def user_price_files() -> list[Path]:
    """The user's extension files: the config-dir prices.yaml, then $CLBENCH_PRICES entries."""
    from platformdirs import user_config_dir

    files = [Path(user_config_dir("clbench")) / "prices.yaml"]
    files += [Path(p) for p in os.environ.get(PRICES_ENV, "").split(os.pathsep) if p]
    return files


class PriceTable:
    """Prices by model name; `cost()` returns None for a model it does not know."""

    def __init__(self, prices: dict[str, Price] | None = None):
        self.prices = dict(prices or {})

    @classmethod
    def load(cls, extra: str | Path | dict | None = None) -> "PriceTable":
        """Built-in table, then the user's files, then `extra` (a YAML path or a models mapping)."""
        table = dict(_builtin())
        for path in user_price_files():
            if path.is_file():
                table.update(_read(path))
        if isinstance(extra, dict):
            table.update(_parse(extra, "prices argument"))
        elif extra:
            path = Path(extra)
            if not path.is_file():
                raise FileNotFoundError(f"price table {path} not found")
            table.update(_read(path))
        return cls(table)

    def lookup(self, model: str) -> Price | None:
        name = model.lower()
        for cand in (name, name.rsplit("/", 1)[-1]):
            for key in (cand, _DATE_SUFFIX.sub("", cand)):
                if key in self.prices:
                    return self.prices[key]
        return None

    def cost(self, model: str, prompt: int, completion: int, cached: int = 0) -> float | None:
        price = self.lookup(model)
        return None if price is None else price.cost(prompt, completion, cached)
