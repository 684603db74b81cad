"""Memoryless red-team forecasters for SalesForecast (`SalesForecastEnv.policy_families`).

Each reads this year's inbox (one `cat`) and nothing else: no workspace files, no memory across
years, no latent values. They are the forecasts an adversary would try first to score without
learning the retailer: naive (last year's units everywhere), price-adjusted naive, a fixed trend,
seasonal annualisation of the quarters, type means, and shrinkage of a product towards its type.
Products missing from the export take their type's mean (the mean of all listed products when the
type is missing too). The red team plays every point of their grids stateless; none may reach
r_reference (the stateless `SalesForecastReference`).

`Forecaster.predictions(observation, inbox)` is the whole policy (a pure function of what the agent
saw), so measurements can score a grid from one read of each inbox.

`StoreShrink` (red team rt8) is the stateless reference's own single-year forecast with the stores whose
export is not visible scaled by `other`: the score is 1 - WAPE per year, so a year whose visible store
sells most (the others little: a small denominator) weighs an over-forecast of the others more than a
year whose visible store sells least weighs their under-forecast, and the best common factor for the
unseen stores is below 1. v5's reference took 1 and this family beat it; v6's takes the metric-optimal factor of the
train split (`SalesForecastReference.unseen`), and the family scales its forecast further.

`VolumeShrink` (v6's next hole) starts from the same single-year forecast at factor 1 (it does not use the
reference's `unseen`) and scales the unseen stores by a factor that depends on the visible store's volume: `hi` when
the log mean forecast of the visible store's first requested year is below `threshold`, `lo` otherwise. A small
visible store makes larger unseen ones likely, a large one smaller ones; the thresholds are the train split's
quantiles of that log level (0.33, 0.5, 0.67: 3.94, 4.24, 4.54), which an attacker computes from the train split.
It beat the reference's constant factor 0.7; the reference now scales by a smooth function of the same level.

On fresh worlds (issue 29) the threat is a forecaster written without the world: each family's point chosen on the
train split's worlds, frozen, and played on worlds 1-20 must not lead the stateless reference pooled over them by two
standard errors (`SalesFreshWorlds`, the pooled verdict of `clbench redteam --pooled-worlds`;
tests/test_salesforecast.py; volume-shrink's frozen point trails by 0.010 +- 0.005). A point chosen on
a fresh world's own scored years learns that world from its answers: its lead (up to +0.059) is held to a band
around the canonical world's, not to 0.
"""
from __future__ import annotations

import csv
import functools
import io
import json
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from statistics import mean

import numpy as np

from clbench import redteam
from clbench.agent import Agent
from clbench.agents.salesforecast import SalesForecastReference

_FILE = re.compile(r"^  (inbox/\S+) - .* sales export for (\d{4})", re.MULTILINE)
_STORE = re.compile(r"^  inbox/\S+ - .* \((\w+)\) sales export for \d{4}", re.MULTILINE)
_REQUEST = re.compile(r"^Requested products: ([\w ]+); stores: ([\w ]+); years: (\d{4})-(\d{4})", re.MULTILINE)
SEP = "=====CLBENCH-SEP====="


def read_command(observation: str) -> str:
    """The one shell command that prints the catalog and the export, separated by SEP."""
    path = _FILE.search(observation).group(1)
    return f"cat inbox/catalog.csv; echo {SEP}; cat {path}"


def parse_inbox(observation: str, output: str) -> tuple[dict, dict, int]:
    """(catalog rows by product_id, {product_id: (units, price, [q1..q4] or None)}, export year)."""
    m = _FILE.search(observation)
    year = int(m.group(2))
    body = output.split("--- stdout ---\n", 1)[-1].split("\n--- stderr ---", 1)[0]
    cat_text, export = body.split(SEP + "\n", 1)
    catalog = {r["product_id"]: r for r in csv.DictReader(io.StringIO(cat_text))}
    by_sku = {r["sku"]: pid for pid, r in catalog.items()}
    by_name = {r["name"]: pid for pid, r in catalog.items()}
    rows: dict[str, tuple[float, float, list | None]] = {}
    if export.lstrip().startswith("{"):
        for line in export.splitlines():
            if line.strip():
                rec = json.loads(line)
                rows[by_sku[str(rec["productRef"])]] = (float(rec["qtyTotal"]), float(rec["avgPrice"]), None)
    else:
        table = list(csv.DictReader(io.StringIO(export)))
        if table and "Item" in table[0]:
            for r in table:
                qs = [float(r[f"Units Q{q}"]) for q in range(1, 5)]
                rows[by_name[r["Item"]]] = (sum(qs), float(r["Retail Price ($)"]), qs)
        else:
            acc: dict[str, list] = {}
            for r in table:
                acc.setdefault(by_sku[r["sku"]], []).append((float(r["units"]), float(r["unit_price"])))
            for pid, q in acc.items():
                rows[pid] = (sum(u for u, _ in q), q[0][1], [u for u, _ in q])
    return catalog, rows, year


class Forecaster(Agent):
    """Reads the inbox once, then submits `predictions` inline; keeps nothing across years."""

    deterministic = True

    def __init__(self, card, seed: int = 0, latent=None, elasticity: float = 0.0, trend: float = 1.0,
                 scale: float = 1.0, shrink: float = 0.0, annualise: str = "sum", fill: str = "type"):
        super().__init__(card, seed=seed)
        self.elasticity, self.trend, self.scale, self.shrink = float(elasticity), float(trend), float(scale), float(shrink)
        self.annualise, self.fill = annualise, fill

    def begin_instance(self, observation: str, info: dict) -> None:
        self.first = observation
        self.read = False

    def act(self, observation: str, info: dict) -> str:
        if not self.read:
            self.read = True
            return read_command(self.first)
        preds = self.predictions(self.first, observation)
        return "SUBMIT " + json.dumps({"predictions": [
            {"product_id": p, "store": s, "year": y, "units": round(u, 3)} for (p, s, y), u in preds.items()]})

    def _base(self, units: float, qs: list | None) -> float:
        if qs is None or self.annualise == "sum":
            return units
        return 4 * qs[-1] if self.annualise == "q4x4" else 2 * (qs[-1] + qs[-2])

    def predictions(self, observation: str, output: str) -> dict[tuple[str, str, int], float]:
        catalog, rows, year = parse_inbox(observation, output)
        base = {pid: self._base(u, qs) for pid, (u, _, qs) in rows.items()}
        price = {pid: p for pid, (_, p, _) in rows.items()}
        overall = mean(base.values()) if base else 0.0
        by_type: dict[str, list] = {}
        for pid, b in base.items():
            by_type.setdefault(catalog[pid]["type"], []).append(b)
        type_mean = {t: mean(v) for t, v in by_type.items()}
        m = _REQUEST.search(observation)
        products, stores = m.group(1).split(), m.group(2).split()
        out = {}
        for pid in products:
            typ = catalog[pid]["type"]
            fallback = type_mean.get(typ, overall) if self.fill == "type" else overall
            own = base.get(pid)
            level = fallback if own is None else (1 - self.shrink) * own + self.shrink * fallback
            then = price.get(pid, float(catalog[pid][f"price_{year + 1}"]))
            for y in range(int(m.group(3)), int(m.group(4)) + 1):
                ratio = float(catalog[pid][f"price_{y}"]) / then
                u = self.scale * level * ratio ** -self.elasticity * self.trend ** (y - year)
                for s in stores:
                    out[(pid, s, y)] = max(0.0, u)
        return out


class StoreShrink(SalesForecastReference):
    """The stateless reference's forecast (its script on an empty workspace: the visible year alone), then every
    cell of a store other than the visible one times `other`; keeps nothing across years."""

    name = "store-shrink"

    def __init__(self, card, seed: int = 0, latent=None, other: float = 0.8, unseen: tuple | None = None):
        super().__init__(card, seed=seed, unseen=unseen)
        self.other = float(other)

    def factor(self) -> str:
        """A Python expression for the unseen stores' factor (`level`: the visible store's log mean forecast of the
        first requested year)."""
        return repr(self.other)

    def unseen_factor(self, level: float) -> float:
        """What its plan multiplies the reference's factor-1 forecast of an unseen store's cell by: the reference's
        own factor (`unseen`, clipped as its script clips it), then `factor` (for measurements that score a grid
        from one factor-1 forecast per instance)."""
        a, b = self.unseen
        return min(max(a + b * level, 0.3), 1.5) * eval(self.factor(), {"__builtins__": {}}, {"level": level})

    def begin_instance(self, observation: str, info: dict) -> None:
        super().begin_instance(observation, info)
        store = _STORE.search(observation).group(1)
        scale = ("python3 -c \"import json, math; d = json.load(open('predictions.json')); p = d['predictions']; "
                 "y0 = min(c['year'] for c in p); "
                 f"v = [c['units'] for c in p if c['store'] == '{store}' and c['year'] == y0]; "
                 "level = math.log(max(sum(v) / len(v), 1e-9)); "
                 f"f = {self.factor()}; "
                 "[c.update(units=round(c['units'] * f, 3)) for c in p "
                 f"if c['store'] != '{store}']; json.dump(d, open('predictions.json', 'w'))\"")
        self.plan.insert(len(self.plan) - 1, scale)  # before the submission

    def end_instance(self, reward: float, info: dict, observation: str = "") -> None:
        """Nothing carried over (the reference keeps the feedback's realised units)."""


class VolumeShrink(StoreShrink):
    """The stateless reference's forecast at factor 1 on the unseen stores (whatever the reference's `unseen`), then
    those stores' cells times `hi` if the visible store's log level is below `threshold`, else times `lo`."""

    name = "volume-shrink"

    def __init__(self, card, seed: int = 0, latent=None, threshold: float = 4.24, lo: float = 0.5, hi: float = 1.1):
        super().__init__(card, seed=seed, unseen=(1.0, 0.0))
        self.threshold, self.lo, self.hi = float(threshold), float(lo), float(hi)

    def factor(self) -> str:
        return f"({self.hi!r} if level < {self.threshold!r} else {self.lo!r})"


# ---------------------------------------------------------------- measuring: points without a sandbox (issue 29)
# Tools for the red team's measurements, never agents: they read the env's instances and realised units; those that
# import the env's scoring say so (redteam.privileged), as an oracle class does (tests/test_reference_imports.py).
def export_line(data) -> str:
    """The observation's line naming an instance's visible export (`data`: its payload), as the env writes it."""
    return f"  {data.export} - {data.store['name']} ({data.store['id']}) sales export for {data.year - 1}"


def inbox_view(env, slot) -> tuple[str, str]:
    """What a Forecaster reads of an instance without a sandbox: the observation's lines naming the export and the
    requested cells, and what its one read (`read_command`) prints, from the instance's files
    (tests/test_salesforecast.py checks it gives the sandboxed read's forecasts)."""
    u, data = env.unwrapped, slot.instance.payload
    years = sorted({y for _, _, y in data.cells})
    obs = (f"{export_line(data)}\n"
           f"Requested products: {' '.join(sorted({p for p, _, _ in data.cells}))}; "
           f"stores: {' '.join(s['id'] for s in u.spec_data['stores'])}; years: {years[0]}-{years[-1]}")
    return obs, data.files["inbox/catalog.csv"] + SEP + "\n" + data.files[data.export]


@functools.lru_cache(maxsize=None)
def world_env(split: str, world):
    """The registered SalesForecast env (unwrapped: no sandbox is started) of `split` in world `world`."""
    from clbench.registry import env_class, env_id_for

    return env_class(env_id_for("salesforecast"))(split=split, world_seed=world)


@functools.lru_cache(maxsize=None)
def _stateless_rewards(split: str, world, agent_name: str, params: tuple) -> tuple[float, ...]:
    return tuple(reference_rewards(world_env(split, world), agent_name=agent_name, **dict(params)))


def stateless_rewards(split: str, world, agent_name: str = "reference", **params) -> list[float]:
    """`reference_rewards` played stateless in one world, once per process (the fresh-world tests and the pooled
    verdict play the same worlds)."""
    return list(_stateless_rewards(split, world, agent_name, tuple(sorted(params.items()))))


@functools.lru_cache(maxsize=None)
def train_forecasts(world_seed) -> list:
    """`factor_one_forecasts` of a train world, once per process."""
    return factor_one_forecasts(world_env("train", world_seed))


def point_label(family: str, params: dict) -> str:
    return f"{family} {params}"


#: what the reference's script wrote, by the sha256 of its workspace's files and its arguments (run_script_once)
_SCRIPT_OUTPUTS: dict[str, dict] = {}


def run_script_once(ws, argv: list[str]) -> None:
    """`run_script` (the reference's forecast.py in process), run once per distinct input: the script is a pure
    function of the workspace's files and its arguments, and the red team's points built on it (store-shrink,
    volume-shrink) run it on the very inputs of the stateless reference or of each other, then rescale its output
    by their own command. A repeat writes back the files the first run wrote."""
    import hashlib

    from clbench.agents.salesforecast import run_script

    def files() -> dict[str, bytes]:
        return {str(p.relative_to(ws)): p.read_bytes() for p in sorted(ws.rglob("*")) if p.is_file()}

    before = files()
    digest = hashlib.sha256(repr((sorted(before.items()), argv)).encode()).hexdigest()
    if digest not in _SCRIPT_OUTPUTS:
        run_script(ws, argv)
        _SCRIPT_OUTPUTS[digest] = {rel: data for rel, data in files().items() if before.get(rel) != data}
        if not _SCRIPT_OUTPUTS[digest]:
            raise RuntimeError(f"the reference's script wrote nothing in {ws} (arguments {argv})")
    for rel, data in _SCRIPT_OUTPUTS[digest].items():
        (ws / rel).write_bytes(data)


def run_after_script(ws, command: str) -> None:
    """A command a plan runs after the script (StoreShrink's rescaling of predictions.json): a `python3 -c` one-liner
    in this process, in folder `ws`, as `run_script` runs forecast.py (no python3 start per forecast), else bash."""
    import contextlib

    if command.startswith("python3 -c "):
        _, _, code = shlex.split(command)
        with contextlib.chdir(ws):
            exec(compile(code, "<python3 -c>", "exec"), {"__name__": "__main__"})
    else:
        subprocess.run(["bash", "-c", command], cwd=ws, check=True)


@redteam.privileged
def reference_rewards(env, stateful: bool = False, freeze_at: int | None = None, agent_name: str = "reference",
                      **kwargs) -> list[float]:
    """The reference's rewards in schedule order, its own script (FORECAST_SCRIPT, with the arguments the agent gives
    it) run in this process on each instance's inbox files, in a folder standing in for the workspace (one for the
    whole rollout when `stateful`, inbox/ replaced every year, the feedback passed to the agent; a new one and a new
    agent per instance otherwise), once per distinct input (run_script_once). The heredocs of its plan run with bash;
    a red-team `agent_name` built on the reference's plan with `kwargs` rescales the forecast with a python3
    one-liner, run in process (run_after_script). The sandboxed run gives the same forecasts
    (tests/test_salesforecast.py) at a fraction of the cost: no python3 start and import of pandas and scikit-learn
    per forecast."""
    from clbench.agent import make_agent
    from clbench.envs.salesforecast.scoring import parse_predictions, skill, wape

    u = env.unwrapped
    kwargs = kwargs or {"freeze_at": freeze_at}
    agent = make_agent(agent_name, env, seed=0, **kwargs)
    rewards = []
    with tempfile.TemporaryDirectory() as tmp:
        for pos, slot in enumerate(u.schedule.order(0)):
            data = slot.instance.payload
            ws = Path(tmp) / ("ws" if stateful else f"ws{pos}")
            put_inbox(ws, data)
            if not stateful:  # a fresh agent per instance, as the runner's stateless pass plays it
                agent = make_agent(agent_name, env, seed=0, **kwargs)
            # the observation's line naming the visible export (StoreShrink reads its store)
            agent.begin_instance(export_line(data), {"position": pos})
            *commands, submit = agent.plan
            at = next(i for i, c in enumerate(commands) if c.startswith("python3 forecast.py"))
            command = shlex.split(commands[at])
            if command[:2] != ["python3", "forecast.py"] or not submit.startswith("SUBMIT"):
                raise ValueError(f"{agent_name}'s plan is not the reference's: {commands[at]!r}, {submit[:40]!r}")
            for other in commands[:at]:  # heredocs writing books.csv and forecast.py: cheap, run by bash
                subprocess.run(["bash", "-c", other], cwd=ws, check=True)
            run_script_once(ws, command[2:])
            for other in commands[at + 1:]:
                run_after_script(ws, other)
            preds = parse_predictions(json.loads((ws / "predictions.json").read_text()), data.cells)
            actual = {c: u.world.sales[c] for c in data.cells}
            w = wape(preds, actual)
            rewards.append(skill(w))
            agent.end_instance(rewards[-1], {"position": pos}, u._feedback(data.year, skill(w), w, preds, actual))
    return rewards


def put_inbox(ws: Path, data) -> None:
    """Writes an instance's files (`data`: its payload) into folder `ws`, which stands in for its workspace; an earlier
    year's inbox/ is removed first, as the env replaces it every year."""
    shutil.rmtree(ws / "inbox", ignore_errors=True)
    for rel, text in data.files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)


@redteam.privileged
def factor_one_forecasts(env) -> list[tuple[dict, dict, str]]:
    """(the stateless reference's forecast with factor 1 on unseen stores, the realised units, the visible store) of
    every instance of `env` (unwrapped), in schedule order: its script run once per instance, in process."""
    from clbench.agents.salesforecast import run_script
    from clbench.envs.salesforecast.scoring import parse_predictions

    agent = SalesForecastReference(None, unseen=(1.0, 0.0))
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for pos, slot in enumerate(env.schedule.order(0)):
            data = slot.instance.payload
            ws = Path(tmp) / f"ws{pos}"  # a fresh workspace: stateless
            put_inbox(ws, data)
            agent.begin_instance("", {"position": pos})
            command = next(c for c in agent.plan if c.startswith("python3 forecast.py"))
            run_script(ws, shlex.split(command)[2:])
            preds = parse_predictions(json.loads((ws / "predictions.json").read_text()), data.cells)
            out.append((preds, {c: env.world.sales[c] for c in data.cells}, data.store["id"]))
    return out


@redteam.privileged
def train_scores(world_seed, full: bool = False) -> dict[tuple[str, str], float]:
    """Every family point's stateless mean on a train world by (family, `point_label`), without a sandbox: a
    Forecaster on `inbox_view`, a point built on the reference's script (StoreShrink) as the reference's factor-1
    forecasts (`train_forecasts`) with the unseen stores' cells times its `unseen_factor`."""
    from clbench.agent import load_object
    from clbench.envs.salesforecast.scoring import skill, wape

    env = world_env("train", world_seed)
    out = {}
    for fam, path, kw in redteam.family_points(env.env_id, full):
        agent = load_object(path)(env.agent_card, **kw)
        rewards = []
        for slot, (preds, actual, visible) in zip(env.schedule.order(0), train_forecasts(world_seed)):
            if isinstance(agent, StoreShrink):
                first = min(y for _, _, y in preds)
                seen = [u for (_, s, y), u in preds.items() if s == visible and y == first]
                f = agent.unseen_factor(np.log(np.mean(seen)))
                preds = {c: u * (1.0 if c[1] == visible else f) for c, u in preds.items()}
            else:
                preds = agent.predictions(*inbox_view(env, slot))
            rewards.append(skill(wape(preds, actual)))
        out[(fam, point_label(fam, kw))] = float(np.mean(rewards))
    return out


@redteam.privileged
def point_mean(env, path: str, params: dict) -> float:
    """A family point's stateless mean over `env`'s schedule without a sandbox: a Forecaster on `inbox_view`, a point
    built on the reference's script (StoreShrink) played as `reference_rewards` plays it (`stateless_rewards`)."""
    from clbench.agent import load_object
    from clbench.envs.salesforecast.scoring import skill, wape

    u = env.unwrapped
    cls = load_object(path)
    if not issubclass(cls, Forecaster):
        return float(np.mean(stateless_rewards(u.split, u.world_seed, path, **params)))
    agent = cls(u.agent_card, **params)
    return float(np.mean([skill(wape(agent.predictions(*inbox_view(env, slot)),
                                     {c: u.world.sales[c] for c in slot.instance.payload.cells}))
                          for slot in u.schedule.order(0)]))


def point_means(env, full: bool = False) -> dict[tuple[str, str], float]:
    """Every declared family point's stateless mean on `env`'s schedule (`point_mean`) by (family, `point_label`):
    the whole grid (the full one when `full`) from one read of each instance's files."""
    return {(fam, point_label(fam, kw)): point_mean(env, path, kw)
            for fam, path, kw in redteam.family_points(env.unwrapped.env_id, full)}


@functools.lru_cache(maxsize=None)
def canonical_point_means(full: bool = False) -> dict[tuple[str, str], float]:
    """`point_means` on the canonical world, once per process: tests/test_salesforecast.py's verdict on every point,
    and tests/test_redteam.py plays each family's best of them through the runner."""
    return point_means(world_env("test", None), full)


class SalesFreshWorlds(redteam.FreshWorldJudge):
    """SalesForecast's fresh-world verdict: each family's point chosen by its mean over the train worlds
    `choose_on` (train split only), frozen, and its stateless mean over a fresh world's years minus the stateless
    reference's there."""

    task = "salesforecast"
    #: a point chosen on a fresh world's own scored years: how far above r_reference it may come; the canonical world's
    #: best point minus r_reference (-0.0064) plus the top of tests/test_salesforecast.py's RED_BAND (0.08)
    world_band = 0.0736

    @staticmethod
    def choose_on(full: bool = False) -> tuple:
        """The train worlds each family's point is chosen on: fit_reference.TRAIN_WORLDS' 41 for the full verdict, by
        default the train split's own world and train world 1."""
        return (None, *range(1, 41)) if full else (None, 1)

    def choose(self, full: bool = False) -> dict[str, dict]:
        worlds = self.choose_on(full)
        means: dict[tuple[str, str], float] = {}
        for w in worlds:
            for key, m in train_scores(w, full).items():
                means[key] = means.get(key, 0.0) + m / len(worlds)
        params = {(fam, point_label(fam, kw)): kw for fam, _, kw in redteam.family_points(self.env_id, full)}
        best: dict[str, tuple[str, str]] = {}
        for key, m in means.items():
            if key[0] not in best or m > means[best[key[0]]]:
                best[key[0]] = key
        return {fam: params[key] for fam, key in best.items()}

    def leads(self, world: int, chosen: dict[str, dict], full: bool = False) -> dict[str, float]:
        env, fams = world_env("test", world), self.families(full)
        ref = float(np.mean(stateless_rewards("test", world)))
        return {fam: point_mean(env, fams[fam].cls, params) - ref for fam, params in chosen.items()}


FRESH_WORLD_JUDGE = SalesFreshWorlds()
