"""Model prices ($ per million tokens) and the cost of one call, with where each price came from.

Lookup order, first hit wins: the user's YAML files and `prices=` argument (see
clbench/data/prices.yaml's header for the layout), then the maintained price list of the
`genai-prices` package (pydantic's, updated with each release; matched by model name and, when
it names a known provider, the base URL), then clbench's own table clbench/data/prices.yaml (a
fallback, as of its date). `lookup_with_source` says which one priced a model; the run card and
the report show it. An unknown model has no price: its cost is None.
"""
from __future__ import annotations

import importlib.resources
import os
import re
from dataclasses import dataclass
from functools import cache, lru_cache
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


BUILTIN_SOURCE = "clbench/data/prices.yaml"


@cache
def _builtin() -> dict[str, Price]:
    path = importlib.resources.files("clbench") / "data" / "prices.yaml"
    return _parse((yaml.safe_load(path.read_text()) or {}).get("models", {}), BUILTIN_SOURCE)


@lru_cache(maxsize=256)
def maintained_price(model: str, base_url: str | None = None) -> tuple[Price, str] | None:
    """(price, source) from genai-prices, or None (not installed, or the model is not listed)."""
    try:
        from importlib.metadata import version

        from genai_prices import Usage, calc_price
    except ImportError:
        return None
    M = 1_000_000

    def calc(**usage):
        for url in ([base_url, None] if base_url else [None]):
            try:
                return calc_price(Usage(**usage), model_ref=model, provider_api_url=url)
            except LookupError:
                continue
        return None

    full = calc(input_tokens=M, output_tokens=M)
    if full is None:
        return None
    cached = calc(input_tokens=M, cache_read_tokens=M)
    inp, out = float(full.input_price), float(full.output_price)
    price = Price(inp, out, float(cached.input_price) if cached is not None else inp)
    return price, f"genai-prices {version('genai-prices')} ({full.provider.name} {full.model.id})"


def user_price_files() -> list[Path]:
    """The user's extension files: the config-dir prices.yaml, then $CLBENCH_PRICES entries."""
    from platformdirs import user_config_dir

    files = [Path(user_config_dir("clbench")) / "prices.yaml"]
    files += [Path(p) for p in os.environ.get(PRICES_ENV, "").split(os.pathsep) if p]
    return files


class PriceTable:
    """Prices by model name; `cost()` returns None for a model it does not know."""

    def __init__(self, prices: dict[str, Price] | None = None, sources: dict[str, str] | None = None,
                 maintained: bool = False, base_url: str | None = None):
        self.prices = dict(prices or {})
        #: model -> where its entry in `prices` came from (a missing entry: the user's own table)
        self.sources = dict(sources or {})
        self.maintained = maintained  # consult genai-prices before the built-in table
        self.base_url = base_url

    @classmethod
    def load(cls, extra: str | Path | dict | None = None, maintained: bool = True) -> "PriceTable":
        """Built-in table, then the user's files, then `extra` (a YAML path or a models mapping);
        with `maintained`, genai-prices ranks above the built-in table (below the user's)."""
        table = dict(_builtin())
        sources = {name: BUILTIN_SOURCE for name in table}

        def add(entries: dict[str, Price], source: str) -> None:
            table.update(entries)
            sources.update({name: source for name in entries})

        for path in user_price_files():
            if path.is_file():
                add(_read(path), f"user file {path}")
        if isinstance(extra, dict):
            add(_parse(extra, "prices argument"), "prices argument")
        elif extra:
            path = Path(extra)
            if not path.is_file():
                raise FileNotFoundError(f"price table {path} not found")
            add(_read(path), f"user file {path}")
        return cls(table, sources, maintained=maintained)

    def _table_entry(self, model: str) -> str | None:
        name = model.lower()
        for cand in (name, name.rsplit("/", 1)[-1]):
            for key in (cand, _DATE_SUFFIX.sub("", cand)):
                if key in self.prices:
                    return key
        return None

    def lookup_with_source(self, model: str, base_url: str | None = None) -> tuple[Price | None, str | None]:
        """(price, where it came from) of `model`, or (None, None) for a model nobody prices."""
        key = self._table_entry(model)
        source = self.sources.get(key, "user table") if key is not None else None
        if key is not None and source != BUILTIN_SOURCE:
            return self.prices[key], source
        if self.maintained:
            for name in dict.fromkeys((model, model.rsplit("/", 1)[-1])):
                found = maintained_price(name, base_url or self.base_url)
                if found is not None:
                    return found
        return (self.prices[key], source) if key is not None else (None, None)

    def lookup(self, model: str) -> Price | None:
        return self.lookup_with_source(model)[0]

    def cost(self, model: str, prompt: int, completion: int, cached: int = 0, base_url: str | None = None) -> float | None:
        """What a call cost at the price the run card shows for `model` at `base_url` (providers price alike
        models differently), or None for a model nobody prices."""
        price = self.lookup_with_source(model, base_url)[0]
        return None if price is None else price.cost(prompt, completion, cached)
