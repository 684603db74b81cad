"""SalesForecast-v6: sandboxed workspace, submissions, scoring, agents, feedback that gives no later
answers away, the red team's memoryless forecasters, fresh worlds, must-show numbers. The env
contract (check_env, reset modes, determinism, info keys, spec card, r_max and r_reference) is
checked for every env in tests/test_contract.py.

Every test runs real commands in the real sandbox (bubblewrap here; whatever "auto" picks).
"""
from __future__ import annotations

import functools
import json
import os
import re

import gymnasium as gym
import numpy as np
import pytest

import clbench  # noqa: F401
from clbench.agent import make_agent
from clbench.envs.salesforecast.generator import generate_world, make_instance
from clbench.envs.salesforecast.scoring import skill, wape
from clbench.envs.salesforecast.workspace import host_python_runtime
from clbench.feedback import format_score
from clbench.rollout import run
from clbench.runcard import validate_run_card
from clbench.runner import RunConfig, play_instance
from clbench.sandbox import SandboxUnavailable, choose_backend
from clbench.agents.salesforecast_redteam import canonical_point_means, inbox_view, point_means, reference_rewards
from clbench.agents.salesforecast_redteam import stateless_rewards, train_forecasts
from clbench.agents.salesforecast_redteam import FRESH_WORLD_JUDGE as JUDGE
from tests.fit_scripts import fit_script

ENV = "clbench/SalesForecast-v6"


def _no_sandbox() -> str:
    try:
        choose_backend("auto", host_python_runtime())
        return ""
    except SandboxUnavailable as exc:
        return str(exc)


pytestmark = pytest.mark.skipif(bool(_no_sandbox()), reason=f"no sandbox backend: {_no_sandbox()}")


@pytest.fixture
def env():
    e = gym.make(ENV)
    yield e
    e.close()


def _cells(env):
    return env.unwrapped.slot.instance.payload.cells


def _play(env, agent, obs, info) -> tuple[float, list[str]]:
    """Play one instance with `agent`; its reward and the observations after each step."""
    traj: list[dict] = []
    out = play_instance(env, agent, obs, info, traj)
    assert out["error"] is None, out["error"]
    return out["reward"], [ev["observation"] for ev in traj if ev["event"] == "step"]


def _submit(values: dict) -> str:
    return "SUBMIT " + json.dumps({"predictions": [
        {"product_id": p, "store": s, "year": y, "units": u} for (p, s, y), u in values.items()]})


def test_regime_change_from_2031():
    """The drift: from 2031 Chicago's level and the Nordic trend change; nothing else does."""
    spec = gym.make(ENV).unwrapped.spec_data
    change, w = spec["regime_change"], generate_world(spec)
    nordic = [p.product_id for p in w.products if p.collection == "Nordic" and p.launch_year == 2020][0]
    other = [p.product_id for p in w.products if p.collection == "Loft" and p.launch_year == 2020][0]
    ratio = {y: w.expected[(nordic, "NY", y)] / w.expected[(nordic, "NY", y - 1)] for y in (2030, 2031, 2033)}
    assert ratio[2030] == pytest.approx(spec["collections"]["Nordic"]) and change["year"] == 2031
    assert ratio[2031] == pytest.approx(change["growth"]["Nordic"]) == ratio[2033]
    chi_vs_ny = {y: w.expected[(other, "CHI", y)] / w.expected[(other, "NY", y)] for y in (2030, 2031)}
    assert chi_vs_ny[2031] / chi_vs_ny[2030] == pytest.approx(change["store_levels"]["CHI"])
    assert w.latent()["regime_change"] == change


def test_spec_card():
    base = gym.make(ENV).unwrapped
    card = base.spec_card
    assert card.instances == 12 and [v["instances"] for v in card.variants] == [4, 4, 4]
    assert "WAPE" in card.reward and card.max_steps == 21
    assert {t["function"]["name"] for t in card.tools} == {"bash", "submit"}
    assert type(base).resumable is False  # the workspace cannot be rebuilt from a slot
    # the 2031 regime change is not announced: what agents read of the variants must not name it
    drift = base.spec_data["drifts"]["default"][0]
    assert "not announced" in drift["change"]
    said = " ".join(f"{v['name']} {v.get('description', '')}" for v in card.variants).lower()
    assert not any(word in said for word in ("demand", "dynamics", "level", "trend", "chicago", "nordic")), said


def test_instances_ask_75_cells_beyond_the_visible_export():
    base = gym.make(ENV).unwrapped
    world, seen_layouts = base.world, set()
    assert len(world.launched(2034)) == 20 and len(world.launched(2035)) == 24
    for slot in base.schedule.order(0):
        data = slot.instance.payload
        assert len(data.cells) == 75 == len(set(data.cells))
        assert {s for _, s, _ in data.cells} == {"SF", "NY", "CHI"}
        assert {y for _, _, y in data.cells} == set(range(data.year, data.year + 5))
        export = data.export
        seen_layouts.add(data.store["layout"])
        listed = set(data.listed)
        assert len(listed) == round(0.7 * len(world.launched(data.year - 1))) and len(data.files[export]) > 500
        requested = {p for p, _, _ in data.cells}
        assert len(requested) == 5 and len(requested - listed) >= 2, slot.instance_id
        assert str(data.year - 1) in export
        if slot.variant == "new-lines":
            assert any(world.products[int(p[1:]) - 1].launch_year == 2035 for p in requested)
    assert len(seen_layouts) == 3  # the visible store rotates through all three


def test_exports_differ_by_store_and_variant():
    base = gym.make(ENV).unwrapped
    spec = base.spec_data
    headers = {}
    for year, variant in ((2027, spec["schedules"]["default"][0]), (2028, spec["schedules"]["default"][0]),
                          (2029, spec["schedules"]["default"][0]), (2030, spec["schedules"]["default"][1])):
        data = make_instance(base.world, year, variant)
        export = data.export
        text = data.files[export]
        headers[year] = text.splitlines()[0] if export.endswith(".csv") else sorted(json.loads(text.splitlines()[0]))
    assert headers[2027][:4] == "sku," and "weather_index" in headers[2027]
    assert headers[2028].startswith("Item,Retail Price ($),Units Q1") and "Marketing Spend ($)" in headers[2028]
    assert "productRef" in headers[2029] and "weatherIndex" in headers[2029]
    assert "foot_traffic" in headers[2030] and "weather_index" not in headers[2030]


def test_world_is_seeded_and_prices_change_in_2031():
    spec = gym.make(ENV).unwrapped.spec_data
    a, b = generate_world(spec), generate_world(spec)
    assert a.sales == b.sales and a.expected == b.expected
    changed = [p for p in a.products if a.prices[(p.product_id, 2030)] != a.prices[(p.product_id, 2031)]]
    assert 4 <= len(changed) <= 16
    assert all(a.prices[(p.product_id, 2031)] == a.prices[(p.product_id, 2038)] for p in a.products)
    nordic = [p.product_id for p in a.products if p.collection == "Nordic" and p.launch_year == 2020][0]
    ratio = a.expected[(nordic, "NY", 2030)] / a.expected[(nordic, "NY", 2029)]
    assert ratio == pytest.approx(spec["collections"]["Nordic"])


def test_sandbox_hides_ground_truth_and_network(env):
    obs, info = env.reset(seed=0)
    assert "Requested products:" in obs and "2026" in obs
    listing = env.step("ls -R")[0]
    assert listing.count(".csv") + listing.count(".json") == 3 and "2027" not in listing.split("inbox:")[1]
    for probe in ("python3 -c 'import clbench'", "ls /work", "cat /etc/shadow",
                  "find / -path /proc -prune -o -name '*.yaml' -print 2>/dev/null | grep -i salesforecast",
                  "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\""):
        obs, *_ = env.step(probe)
        assert "exit code 0" not in obs, probe
    obs, *_ = env.step("python3 -c 'import numpy, scipy, sklearn, pandas; print(\"libs ok\")'")
    assert "exit code 0" in obs and "libs ok" in obs


def test_workspace_persists_stateful_and_is_fresh_stateless(env):
    env.reset(seed=0)
    env.step("mkdir -p notes && echo remembered > notes/a.txt && cp inbox/sf_sales_2026.csv notes/")
    env.step(_submit({c: 1 for c in _cells(env)}))
    env.reset()
    obs, *_ = env.step("cat notes/a.txt; ls inbox notes")
    assert "remembered" in obs and "NY_2027_report.csv" in obs and "sf_sales_2026.csv" in obs
    assert "inbox:\nNY_2027_report.csv\ncatalog.csv\nrequest.json" in obs  # last year's export left inbox/
    env.reset(options={"instance": "fy2029", "stateless": True})
    obs, *_ = env.step("ls; cat notes/a.txt")
    assert "remembered" not in obs and "No such file" in obs


def test_reward_is_floored_wape_skill(env):
    env.reset(seed=0)
    world = env.unwrapped.world
    actual = {c: world.sales[c] for c in _cells(env)}
    half = {c: a / 2 for c, a in actual.items()}
    obs, r, term, trunc, info = env.step(_submit(half))
    assert term and not trunc and r == pytest.approx(0.5) and info["raw_metric"]["name"] == "wape"
    assert info["raw_metric"]["value"] == pytest.approx(0.5) and not info["solved"]
    # feedback (v2): the score, and realised units of the forecast year only (later years are asked again)
    year = min(y for _, _, y in actual)
    assert f"Instance score: {format_score(r)}" in obs and "WAPE over all requested cells: 0.5000" in obs
    shown = [line for line in obs.splitlines() if line.startswith("  P")]
    assert sorted(shown) == sorted(f"  {p} {st} | {a / 2:.1f} | {a}" for (p, st, y), a in actual.items() if y == year)
    env.reset()
    actual = {c: world.sales[c] for c in _cells(env)}
    obs, r, term, trunc, info = env.step(_submit(actual))
    assert r == pytest.approx(1.0) and info["solved"] and "Forecast for 2028-2032 accepted" in obs
    env.reset()
    wild = {c: 1e6 for c in _cells(env)}
    obs, r, *_ , info = env.step(_submit(wild))
    assert r == 0.0 and info["raw_metric"]["value"] > 100  # floored reward, raw WAPE kept
    assert wape({("a", "b", 1): 3.0}, {("a", "b", 1): 4}) == pytest.approx(0.25) and skill(1.5) == 0.0


def test_malformed_submissions_explain_and_allow_resubmission(env):
    env.reset(seed=0)
    cells = _cells(env)
    obs, r, term, trunc, info = env.step(_submit({c: 5.0 for c in cells[:70]}))
    assert "Invalid action" in obs and "5 missing" in obs and not term and info["steps_left"] == 20
    obs, *_ = env.step(_submit({**{c: 5.0 for c in cells[1:]}, cells[0]: -1.0}))
    assert "units must be a finite number >= 0" in obs
    assert "exit code 0" in env.step("ls")[0]  # a valid action resets the invalid streak
    assert "cannot read" in env.step("SUBMIT ../../etc/passwd")[0]
    assert "cannot read 'predictions.json'" in env.step("SUBMIT")[0]
    obs, r, term, trunc, info = env.step("SUBMIT {garbage")  # third invalid in a row: the year scores 0
    assert term and r == 0.0 and "does not parse" in obs and "3 invalid actions" in obs
    env.reset()
    env.step("echo '{\"predictions\": [1, 2]}' > bad.json")
    assert "prediction 0 is not an object" in env.step("SUBMIT bad.json")[0]
    good = [{"product_id": p, "store": s, "year": y, "units": 3} for p, s, y in _cells(env)]
    obs, *_ = env.step(json.dumps({"tool": "bash", "arguments": {"command": f"echo '{json.dumps(good)}' > p.json"}}))
    assert "exit code 0" in obs
    obs, r, term, trunc, info = env.step(json.dumps({"tool": "submit", "arguments": {"path": "p.json"}}))
    assert term and 0 < r < 1 and info["step"] == 4


def test_command_grammar_budget_and_timeout():
    env = gym.make(ENV, schedule="short", command_timeout=1)
    env.reset(seed=0)
    assert "hi" in env.step("bash: echo hi")[0]
    assert "fenced" in env.step("```bash\necho fenced\n```")[0]
    obs, *_ = env.step("sleep 5")
    assert "killed: timed out after 1 s" in obs
    assert "exit code 0" in env.step("true")[0]
    for _ in range(15):
        env.step("true")
    obs, r, term, trunc, info = env.step("true")
    assert "shell commands left: 0" in obs
    obs, r, term, trunc, info = env.step("true")
    assert "all 20 shell commands" in obs and not term and info["steps_left"] == 0 and trunc and r == 0.0
    env.close()


def test_the_stateless_reference_has_headroom(env):
    # test_contract: the oracle and the stateless reference reproduce r_max and r_reference
    base = env.unwrapped
    assert base.r_reference < 0.8 * base.r_max
    obs, info = env.reset(seed=0, options={"instance": "fy2031", "stateless": True})
    r, seen = _play(env, make_agent("reference", env, seed=0), obs, info)
    assert r < base.r_max - 0.2 and "panel rows 14, store-years 1" in seen[1]


def test_reference_learns_from_its_panel(env):
    """Stateful, the panel file in the workspace grows (exports and the feedback's realised units) and the forecast
    beats the stateless one."""
    agent = make_agent("reference", env, seed=0)
    obs, info = env.reset(seed=0)
    log = []
    for pos in range(4):
        if pos:
            obs, info = env.reset()
        log += _play(env, agent, obs, info)[1]
    env.reset()
    # 4 exports x 14 rows and the 3 feedbacks' 15 realised units of 2027-2029 (every store), 10 rows in both
    assert "panel rows 91, store-years 10" in log[-2] and "92 panel.csv" in env.step("wc -l panel.csv")[0]
    scores = [float(o.split("Instance score: ", 1)[1].split()[0]) for o in log if o.startswith("Forecast for")]
    assert len(scores) == 4 and np.mean(scores[1:]) > env.unwrapped.r_reference + 0.1


def test_reference_keeps_the_feedbacks_realised_units_until_frozen(env):
    """The stateful reference writes the realised units its last feedback showed (every store) to books.csv at the
    start of the next year, stateless it has none; frozen at K it still writes K-1's (known before K), never later."""
    u = env.unwrapped
    slots = u.schedule.order(0)

    def feedback(pos: int) -> str:
        data = slots[pos].instance.payload
        actual = {c: u.world.sales[c] for c in data.cells}
        return u._feedback(data.year, 0.5, 0.5, {c: 1.0 for c in data.cells}, actual)

    def books_written(agent, pos: int) -> list[str]:
        agent.begin_instance("", {"position": pos})
        return [c for c in agent.plan if c.startswith("cat > books.csv")]

    agent = make_agent("reference", env, seed=0, freeze_at=2)
    assert books_written(agent, 0) == []  # nothing before the first feedback (the stateless case too)
    agent.end_instance(0.5, {"position": 0}, feedback(0))
    (books,) = books_written(agent, 1)
    rows = books.splitlines()[2:-1]
    data = slots[0].instance.payload
    assert sorted(rows) == sorted(f"{s},{y},{p},{u.world.sales[(p, s, y)]}" for p, s, y in data.cells if y == data.year)
    assert len(rows) == 15 and {r.split(",")[0] for r in rows} == {"SF", "NY", "CHI"}
    assert agent.state_dict()["books"] == []  # consumed
    agent.end_instance(0.5, {"position": 1}, feedback(1))
    assert agent.state_dict()["books"] and len(books_written(agent, 2)) == 1  # K-1's feedback, at K
    assert "--frozen" in agent.plan[-2]
    agent.end_instance(0.5, {"position": 2}, feedback(2))
    assert books_written(agent, 3) == []  # K's feedback came after the freeze


def test_random_agent_is_a_floor():
    env = gym.make(ENV, schedule="short", command_timeout=5)
    agent = make_agent("random", env, seed=1)
    rewards = [_play(env, agent, *env.reset(seed=0))[0], _play(env, agent, *env.reset())[0]]
    env.close()
    assert np.mean(rewards) < 0.3


@pytest.mark.slow
def test_must_show_reference_rollout(tmp_path):
    out = tmp_path / "sf"
    card = run(RunConfig(ENV, "reference", str(out), rollouts=5, workers=2), say=lambda m: None)
    validate_run_card(out / "run_card.json")
    t = card["tasks"]["salesforecast/reference"]
    assert t["normalized_gain"]["mean"] >= 0.3
    assert t["normalized_gain"]["ci"][0] > 0
    assert t["mean_reward_stateless"] < 0.8 * t["r_max"]
    # the panel fills in: every later variant's stateful mean beats the first one's
    means = [v["mean_reward_stateful"] for v in t["per_variant"]]
    assert means == sorted(means)


def test_feedback_shows_the_forecast_year_only(env):
    """issue 28: v1 gave the 5-year sum of actual units (a coming drop, asked for later). Two forecasts that
    differ only in the later years get the same feedback apart from the score and the overall WAPE."""
    obs0, info = env.reset(seed=0)
    u = env.unwrapped
    cells = _cells(env)
    year = min(y for _, _, y in cells)
    actual = {c: u.world.sales[c] for c in cells}
    texts = []
    for later in (0.5, 2.0):
        env.reset(seed=0, options={"instance": info["instance_id"]})
        obs, r, *_ = env.step(_submit({c: a * (0.9 if c[2] == year else later) for c, a in actual.items()}))
        keep = [ln for ln in obs.splitlines() if not ln.startswith(("Instance score", "- WAPE over all"))]
        texts.append("\n".join(keep))
        for y in range(year + 1, year + 5):  # nothing per later year, no sums of actual units
            assert str(y) not in obs.split("accepted", 1)[1]
        assert str(sum(actual.values())) not in obs
    assert texts[0] == texts[1]


def test_the_agent_card_and_variants_say_nothing_about_the_regime_change():
    env = gym.make(ENV).unwrapped
    card = json.dumps(env.agent_card)
    assert not re.search(r"regime|drift|competitor|decline|2031|level falls", card, re.I)
    public = card + json.dumps(env.spec_card.variants) + (type(env).__doc__ or "")
    public += "".join(ln.split("#", 1)[1] for ln in (open(__import__("clbench.env", fromlist=["x"]).task_spec_path(
        "salesforecast")).read().splitlines()) if "#" in ln)
    leaked = [s for s in env.public_secrets() if s in public]
    assert not leaked
    assert "Nordic collection" in env.public_secrets() and "+9% a year" in env.public_secrets()


def _latent_values(lat: dict) -> dict[str, list]:
    """Each kind of latent value of a world (oracle view), as a list of its values."""
    (store, cut), = lat["regime_change"]["store_levels"].items()
    (coll, turn), = lat["regime_change"]["growth"].items()
    return {"store level": list(lat["store_levels"].values()), "base volume": list(lat["base_units"].values()),
            "growth": list(lat["growth"].values()), "elasticity": [lat["price_elasticity"]],
            "quarter share": lat["quarter_shares"], "regime cut": [cut], "regime turn": [turn]}


def store_spread(levels: dict) -> float:
    """How far the stores are from the visible one, averaged over which store is visible: mean over v of
    sum_s |level_s - level_v| / sum_s level_s (what a forecaster taking every store for the visible one misses)."""
    v = np.array(list(levels.values()))
    return float(np.mean([np.abs(v - x).sum() / v.sum() for x in v]))


def test_worlds_draw_every_latent_value_anew():
    """issue 29: the train split and fresh worlds 1-20 draw store levels, base volumes, growth, elasticity,
    seasonality and the regime change from ranges of their own: no canonical value of any kind recurs (v3
    shuffled the canonical store levels and kept the base volumes, both in the public task YAML), and the
    drawn worlds differ from each other. A world seed names one world; the drawn regime is of the canonical kind."""
    from clbench.envs.salesforecast import generator as g

    canon = gym.make(ENV).unwrapped.latent()
    worlds = {"train": {"split": "train"}, **{f"w{n}": {"world_seed": n} for n in range(1, 21)}}
    lat = {name: gym.make(ENV, **kw).unwrapped.latent() for name, kw in worlds.items()}
    reused = [(name, kind, v) for name, x in lat.items() for kind, values in _latent_values(x).items()
              for v in values if v in _latent_values(canon)[kind]]
    assert not reused
    # nor a shuffle of them with a jitter (v3's old store levels and growth): a fresh world's sorted values of a
    # kind all lie within 10% (growth: 0.011) of the canonical sorted ones by chance only (here 1 of 21 worlds)
    near = {kind: sum(bool(np.all(np.abs(np.sort(_latent_values(x)[kind]) / np.sort(_latent_values(canon)[kind]) - 1)
                                  <= (0.011 if kind == "growth" else 0.1))) for x in lat.values())
            for kind in ("store level", "base volume", "growth")}
    assert max(near.values()) <= 3, near
    keys = {json.dumps({k: v for k, v in x.items() if k != "expected"}, sort_keys=True) for x in lat.values()}
    assert len(keys) == len(lat)
    for x in lat.values():
        v = _latent_values(x)
        levels = sorted(v["store level"])
        assert g.LEVEL_LOW[0] <= levels[0] and levels[2] / levels[0] >= g.LEVEL_RATIO[0] - 0.01
        assert min(v["base volume"]) >= g.BASE_UNITS[0] and max(v["base volume"]) <= g.BASE_UNITS[1]
        assert max(v["growth"]) >= g.GROWTH_FAST[0] and min(v["growth"]) <= g.GROWTH_SLOW[1]
        assert sum(v["quarter share"]) == pytest.approx(1, abs=0.005) and np.argmax(v["quarter share"]) == 3
        assert x["regime_change"]["year"] == canon["regime_change"]["year"]
        (coll, turn), = x["regime_change"]["growth"].items()
        assert coll == max(x["growth"], key=x["growth"].get) and turn < 1 and v["regime cut"][0] < 1
        # the cut never falls on the largest store, so it never erases the store differences (world 16 of v4: the
        # largest store cut to near the others' level, the stores' spread 0.37 -> 0.18, the reference's gain 0.02)
        (store, cut), = x["regime_change"]["store_levels"].items()
        after = {**x["store_levels"], store: x["store_levels"][store] * cut}
        assert x["store_levels"][store] < max(x["store_levels"].values())
        assert store_spread(after) > store_spread(x["store_levels"])
    assert gym.make(ENV, world_seed=1).unwrapped.latent() == lat["w1"]


def test_no_two_worlds_share_an_answer():
    """issue 28/29: the ground truth (realised units of every requested cell) of each instance differs between the
    canonical world, the train split and fresh worlds 1-3 and their train twins: 0 identical of 12 per pair."""
    def truths(**kw):
        u = gym.make(ENV, **kw).unwrapped
        return [tuple(u.world.sales[c] for c in s.instance.payload.cells) for s in u.schedule.order(0)]

    canon = truths()
    pairs = [(canon, truths(split="train"))] + [(truths(world_seed=n), truths(world_seed=n, split="train"))
                                                 for n in (1, 2, 3)]
    pairs += [(canon, truths(world_seed=n)) for n in (1, 2, 3)]
    assert [sum(a == b for a, b in zip(x, y)) for x, y in pairs] == [0] * len(pairs)
    assert truths() == canon  # and a world's truth is reproducible


def test_a_world_reusing_a_canonical_value_fails_the_check():
    """The check above can fail: a world with the canonical base volumes kept (v3's old draw) or one canonical
    store level put back is caught."""
    canon = gym.make(ENV).unwrapped.latent()
    world = gym.make(ENV, world_seed=3).unwrapped.latent()
    kept = {**world, "base_units": dict(canon["base_units"])}
    one_level = {**world, "store_levels": {**world["store_levels"], "SF": canon["store_levels"]["NY"]}}
    for bad in (kept, one_level):
        assert any(v in _latent_values(canon)[kind] for kind, vals in _latent_values(bad).items() for v in vals)
    assert not any(v in _latent_values(canon)[kind] for kind, vals in _latent_values(world).items() for v in vals)


def test_no_memoryless_forecaster_reaches_the_reference(env):
    """issue 28: every point of every declared family (naive, price-adjusted, trend, seasonal, shrinkage),
    stateless, stays below r_reference on the canonical world."""
    (_, policy), best = max(canonical_point_means(SLOW).items(), key=lambda kv: kv[1])
    assert best < env.unwrapped.r_reference, (policy, best)


def oracle_rewards(env) -> list[float]:
    """The oracle's rewards in schedule order: the true expected demand of every requested cell."""
    u = env.unwrapped
    return [skill(wape({c: u.world.expected[c] for c in s.instance.payload.cells},
                       {c: u.world.sales[c] for c in s.instance.payload.cells})) for s in u.schedule.order(0)]


def fast_world_numbers(world_seed, drift_at: int = 4) -> dict:
    """tests/test_spectrummonitor.world_numbers for SalesForecast without a sandboxed python3 per forecast: r_max,
    r_reference, the reference's normalized gain (one stateful rollout: it is deterministic), the drift cost
    (unfrozen minus frozen at `drift_at`, after it), every red-team point's mean (point_means) and the best."""
    env = gym.make(ENV, world_seed=world_seed)
    try:
        r_max, stateless = float(np.mean(oracle_rewards(env))), stateless_rewards("test", world_seed)
        r_ref = float(np.mean(stateless))
        live, frozen = reference_rewards(env, stateful=True), reference_rewards(env, stateful=True, freeze_at=drift_at)
        assert live[:drift_at] == frozen[:drift_at]  # identical until the freeze
        points = point_means(env, SLOW)
        (_, label), best = max(points.items(), key=lambda kv: kv[1])
        return {"world": world_seed, "r_max": r_max, "r_reference": r_ref,
                "normalized_gain": (np.mean(live) - r_ref) / (r_max - r_ref),
                "drift_cost": float(np.mean(np.subtract(live, frozen)[drift_at:])),
                "red_team_best": best, "red_team_policy": label, "points": points}
    finally:
        env.close()


def test_in_process_reference_is_the_sandboxed_one(env):
    """The in-process reference (fast_world_numbers) reproduces the sandboxed calibration exactly, and one
    stateful forecast (position 1, after a panel year) played through the sandbox equals the in-process one."""
    u = env.unwrapped
    assert np.mean(reference_rewards(env)) == u.r_reference and np.mean(oracle_rewards(env)) == u.r_max
    agent = make_agent("reference", env, seed=0)
    played = [_play(env, agent, *env.reset(seed=0))[0], _play(env, agent, *env.reset())[0]]
    assert played == reference_rewards(env, stateful=True)[:2]


@functools.lru_cache(maxsize=1)
def _fit_module():
    return fit_script("salesforecast")


def test_the_unseen_stores_factor_is_fitted_on_the_train_split():
    """The stateless reference's factor on a store with no data of its own, clip(A + B * level, 0.3, 1.5) with
    (A, B) = `UNSEEN`, comes from tasks/salesforecast/fit_reference.py on train-split worlds only (the whole fit, 41
    worlds, with CLBENCH_SLOW=1: 0.5301 vs 0.4804 for the constant 0.7, 0.4532 for v5's 1): on a few of them the
    fit's factor-1 forecasts, scaled by the rule on the unseen stores, score what the reference scores there, and
    the rule beats the constant 0.7, which beats v5's factor 1."""
    from clbench.agents.salesforecast import UNSEEN, SalesForecastReference

    fit = _fit_module()
    assert SalesForecastReference.unseen == UNSEEN and UNSEEN in fit.GRID and None in fit.TRAIN_WORLDS
    if SLOW:
        assert fit.fit()[0] == UNSEEN
        return
    insts = train_forecasts(1)
    env = gym.make(ENV, split="train", world_seed=1)
    assert fit.scores(insts, (UNSEEN,))[0] == pytest.approx(np.mean(reference_rewards(env)), abs=1e-4)
    means = fit.scores(insts + train_forecasts(None), (UNSEEN, (0.7, 0.0), (1.0, 0.0)))
    assert means[0] > means[1] > means[2], means

SLOW = bool(os.environ.get("CLBENCH_SLOW"))
#: worlds whose difficulty the default run checks (all 20 with CLBENCH_SLOW=1, every family's full grid): 4 and 18
#: are where v3's reference was reached (full grid +0.00003 and +0.015), 16 where v4's draw cut the largest store
FRESH_WORLDS = range(1, 21) if SLOW else (4, 16, 18)
#: the canonical world's numbers (fast_world_numbers(None); checked under CLBENCH_SLOW=1), and the band around
#: them that every fresh world's must stay in (issue 29)
CANONICAL = {"r_max": 0.9097, "r_reference": 0.6001, "normalized_gain": 0.5060, "drift_cost": 0.1065,
             "red_minus_reference": -0.0064}
BAND = {"r_max": 0.05, "r_reference": 0.2, "normalized_gain": 0.2}  # |fresh - canonical| at most
DRIFT_BAND = (1 / 3, 3)  # the drift cost within these multiples of the canonical one
#: the best red-team point chosen on a fresh world's own years minus r_reference, minus the canonical world's (issue 29's
#: band; measured -0.025..+0.066 over worlds 1-20)
RED_BAND = (-0.05, 0.08)


@pytest.mark.parametrize("world_seed", [None, *FRESH_WORLDS])
def test_the_sandbox_free_inbox_view_reads_what_the_sandboxed_read_prints(world_seed):
    """point_means scores the Forecaster points from `inbox_view` (the instance's files, no sandbox): on every
    instance, every Forecaster point of the grid forecasts from it what it forecasts from the observation and its one
    read (`read_command`) run in the sandbox, as the red team plays it."""
    from clbench import redteam
    from clbench.agents.salesforecast_redteam import Forecaster, read_command

    env = gym.make(ENV, world_seed=world_seed)
    try:
        u = env.unwrapped
        grid = [kw for _, path, kw in redteam.family_points(u.env_id, SLOW) if path.endswith(":Forecaster")]
        assert len(grid) > 10, grid
        for slot in u.schedule.order(0):
            obs, _ = env.reset(seed=0, options={"instance": slot.instance_id, "stateless": True})
            out, *_ = env.step(read_command(obs))
            view = inbox_view(env, slot)
            for kw in grid:
                assert Forecaster(u.agent_card, **kw).predictions(*view) == \
                    Forecaster(u.agent_card, **kw).predictions(obs, out), (slot.instance_id, kw)
    finally:
        env.close()


@functools.lru_cache(maxsize=None)
def _world(world_seed) -> dict:
    return fast_world_numbers(world_seed)


@pytest.mark.parametrize("world_seed", [*FRESH_WORLDS, *([None] if SLOW else [])])
def test_fresh_worlds_keep_the_difficulty(world_seed):
    """issue 28/29: headroom, learning and a costly drift in a fresh world, each within a band of the canonical
    world's (None: the canonical world's own numbers). Worlds 1-20 measured, mean [range] (canonical): r_max 0.917
    [0.880, 0.944] (0.910), r_reference 0.531 [0.479, 0.599] (0.600; v6's constant factor 0.476 [0.381, 0.551]
    (0.526), v5's 0.447 [0.330, 0.556] (0.508)), normalized gain 0.63 [0.54, 0.72] (0.51; v5 0.67 (0.61)), drift
    cost 0.13 [0.05, 0.23] (0.11). v4's draw could cut the largest store, which erased the store differences: world
    16's gain was 0.016 (its stateless reference 0.705, the stateful one losing the three years after the cut, a
    strict xfail here); now 0.66. The reference runs in-process (reference_rewards); the sandboxed rollouts are
    test_must_show_reference_rollout and the contract test's calibration check."""
    n, c = _world(world_seed), CANONICAL
    if world_seed is None:
        assert {k: round(float(n[k]), 4) for k in ("r_max", "r_reference", "normalized_gain", "drift_cost")} == \
            {k: c[k] for k in ("r_max", "r_reference", "normalized_gain", "drift_cost")}, n
        assert round(n["red_team_best"] - n["r_reference"], 4) == c["red_minus_reference"], n
    assert n["r_reference"] < 0.75 * n["r_max"], n
    for key, width in BAND.items():
        assert abs(n[key] - c[key]) <= width, (key, n)
    assert DRIFT_BAND[0] * c["drift_cost"] <= n["drift_cost"] <= DRIFT_BAND[1] * c["drift_cost"], n


@pytest.mark.parametrize("world_seed", FRESH_WORLDS)
def test_the_best_point_chosen_on_a_fresh_worlds_own_years_stays_within_a_band_of_the_canonical_worlds(world_seed):
    """issue 28/29: the best point of every family's grid, chosen on the fresh world's own scored years (the env has
    no re-deals to choose on), minus r_reference stays within RED_BAND of the canonical world's (-0.0064). Such a
    point is not a memoryless forecaster of that world: picking, among 100-200 points, the one that scores best on
    the world's 12 years (900 realised cells) learns the world from its answers, more of it than the stateful
    reference ever sees, and its lead measures the selection on the world's own data, not a policy written without
    it (that threat is test_train_chosen_frozen_forecasters_do_not_lead_the_reference_pooled_over_fresh_worlds).
    Measured (worlds 1-20, every family's full grid): best point minus r_reference -0.031..+0.059, mean +0.007 +-
    0.005 (se), above 0 in worlds 1, 2, 5, 8, 9, 10, 11, 13, 14, 18 and 19 (the strict xfails WORLD_FAILS while such a
    point was held to stay below the reference; the best is volume-shrink at a threshold and low factor that differ by
    world, or store-shrink x0.8); minus the canonical world's -0.0064: -0.025..+0.066. Default worlds: 4 -0.0002, 16
    -0.017, 18 +0.009. v3's reference, whose price term extrapolated a type missing from the export across types, was
    reached in worlds 3, 4 and 18 once base volumes were drawn fresh; with v6's first, constant factor 0.7
    volume-shrink led by +0.059 +- 0.007 in 20 of 20 worlds (canonical +0.068)."""
    n = _world(world_seed)
    assert RED_BAND[0] <= n["red_team_best"] - n["r_reference"] - CANONICAL["red_minus_reference"] <= RED_BAND[1], n


def test_train_chosen_frozen_forecasters_do_not_lead_the_reference_pooled_over_fresh_worlds():
    """issue 29: the threat a fresh world must hold against is a memoryless forecaster written without it. Each
    family's point is chosen on the train split (`SalesFreshWorlds.choose`) and played, frozen, on every fresh world;
    its lead over the stateless reference (its mean over the world's 12 years minus r_reference), pooled over the worlds
    (mean, standard error across worlds), must not be above 0 by two standard errors (clbench.redteam.PooledLead).
    Measured (CLBENCH_SLOW=1: chosen on the 41 train worlds, full grids; lead +- SE over worlds 1-20, worlds where it
    leads, canonical):
      naive {fill: type, scale: 0.8}                -0.157 +- 0.015 (0)  -0.120
      price-adjusted {elasticity: 1.5}              -0.183 +- 0.014 (0)  -0.130
      trend {elasticity: 1.3, trend: 0.9}           -0.150 +- 0.014 (0)  -0.116
      seasonal {annualise: h2x2}                    -0.206 +- 0.015 (0)  -0.172
      shrink-to-type {elasticity: 1.0, shrink: 0.3} -0.191 +- 0.014 (0)  -0.132
      trend-scaled {elasticity 2, scale 0.9, trend 0.9, fill all}  -0.141 +- 0.014 (0)  -0.173
      store-shrink {other: 0.8}                     -0.018 +- 0.005 (3)  -0.018
      volume-shrink {hi: 1.1, lo: 0.5, threshold: 4.24}  -0.010 +- 0.005 (5)  -0.007
    The train scores' shortcut for points built on the reference's script (train_scores) is checked against playing
    the point (reference_rewards) on train world 1: equal to 1e-6."""
    from clbench import redteam
    from clbench.agents.salesforecast_redteam import point_label, train_scores

    assert set(JUDGE.choose_on(SLOW)) <= set(_fit_module().TRAIN_WORLDS)
    report = redteam.pooled_verdict(ENV, FRESH_WORLDS, full=SLOW)
    chosen = {r["family"]: r["params"] for r in report["rows"]}
    assert set(chosen) == set(redteam.families(gym.make(ENV).unwrapped.__class__))
    kw = chosen["volume-shrink"]
    played = reference_rewards(gym.make(ENV, split="train", world_seed=1),
                               agent_name="clbench.agents.salesforecast_redteam:VolumeShrink", **kw)
    shortcut = train_scores(1, SLOW)[("volume-shrink", point_label("volume-shrink", kw))]
    assert shortcut == pytest.approx(np.mean(played), abs=1e-6)
    assert not report["failures"], redteam.format_pooled(report)


def test_the_sandbox_binds_site_folders_a_venv_pth_adds():
    """A venv whose .pth adds a shared dependency folder (site.addsitedir) must see it inside the sandbox
    too, or python3 there lacks numpy; clbench's own folder is never bound."""
    import sys
    from pathlib import Path

    import clbench as pkg

    binds = {src for src, _ in host_python_runtime().binds}
    prefixes = {str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix)}
    numpy_home = str(Path(np.__file__).resolve().parent.parent)
    assert any(numpy_home.startswith(b) for b in binds | prefixes), (numpy_home, binds)
    assert not any(str(Path(pkg.__file__).resolve().parent).startswith(b) for b in binds)



def test_the_sandbox_binds_the_folders_of_its_packages_only(tmp_path, monkeypatch):
    """A folder on sys.path that holds a distribution the sandbox offers is bound (a .pth's shared folder);
    one that holds a user's files (the current folder under `python -m`, a script's folder, PYTHONPATH)
    is not, though it comes first on sys.path."""
    from clbench.envs.salesforecast import workspace

    shared, user = tmp_path / "shared", tmp_path / "project"
    (shared / "clbench_probe_dist-1.0.dist-info").mkdir(parents=True)
    (shared / "clbench_probe_dist-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: clbench-probe-dist\nVersion: 1.0\n")
    (user / "runs").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(shared))
    monkeypatch.syspath_prepend(str(user))
    monkeypatch.setattr(workspace, "SANDBOX_PACKAGES", (*workspace.SANDBOX_PACKAGES, "clbench-probe-dist"))
    binds = {src for src, _ in workspace.host_python_runtime().binds}
    assert str(shared.resolve()) in binds and str(user.resolve()) not in binds, binds


def test_earlier_runs_in_the_users_folder_are_out_of_the_sandboxs_reach(tmp_path, monkeypatch):
    """Red team (s16): the sandbox bound every sys.path folder, so a stateless agent run from a project folder
    read an earlier oracle run's trajectories there and resubmitted its forecasts (r_max without forecasting)."""
    project = tmp_path / "project"
    answers = project / "runs" / "oracle" / "trajectories.jsonl"
    answers.parent.mkdir(parents=True)
    answers.write_text('{"action": "SUBMIT 7f3a9c-answer"}\n')
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.chdir(project)
    e = gym.make(ENV)
    try:
        e.reset(seed=0)
        for probe in (f"cat {answers}", f"ls {project}", f"ls {answers.parent}", "ls runs"):
            obs, *_ = e.step(probe)
            assert "No such file" in obs and "7f3a9c-answer" not in obs, (probe, obs)
        obs, *_ = e.step("find / -path /proc -prune -o -name 'trajector*' -print 2>/dev/null; echo searched")
        assert "searched" in obs and "/runs/oracle/" not in obs, obs
    finally:
        e.close()