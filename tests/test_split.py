"""Train/test separation: `split="train"` never shows a benchmark (`split="test"`) instance.

For every env with a train split, on the default schedule: no instance id appears in both splits,
and no generated problem does either, compared by a fingerprint of the problem itself (the scan's
peaks, the deal, the conversation session, the study table, the forecast year's files) and, where
the first observation states the problem, by the text of the instance's first reset. Envs without
a train split (CodeRepair) refuse it with a ValueError that says why; an unknown split
is refused too. The train split is deterministic and its ids say they are training instances.
"""
from __future__ import annotations

import hashlib
import json

import gymnasium as gym
import pandas as pd
import pytest

import clbench  # noqa: F401  registers the envs
from clbench.registry import env_id_for
from clbench.commands.drift_check import declared_drifts

TRAIN_ENVS = [env_id_for(t) for t in ("spectrummonitor", "poker", "memoryprobe", "cohortstudies",
                                      "salesforecast", "dbexplore")]
REFUSING = {env_id_for("coderepair"): "real bug reports"}
#: envs whose first observation states the whole problem (CohortStudies' first observation is the
#: study's description, the same in both splits by design: its problem is the table behind SQL;
#: SalesForecast's reset opens a sandbox, so its problem is compared by the files it would show)
OBSERVATION_ENVS = [env_id_for(t) for t in ("spectrummonitor", "poker", "memoryprobe")]


def _digest(value) -> str:
    return hashlib.sha256(value if isinstance(value, bytes) else repr(value).encode()).hexdigest()


def problem_fingerprints(env) -> dict[str, str]:
    """{instance id: fingerprint of the generated problem} for every instance of the schedule."""
    out = {}
    for variant in env.schedule.variants:
        for inst in variant.instances:
            p = inst.payload
            if env.task == "spectrummonitor":
                fp = _digest(p.peaks)
            elif env.task == "poker":
                fp = _digest(p.deal)
            elif env.task == "memoryprobe":
                fp = _digest(p.text)
            elif env.task == "cohortstudies":
                table = env.studies[p["study"]].build(p["region"], int(p["seed"])).table
                fp = _digest(pd.util.hash_pandas_object(table, index=True).values.tobytes())
            elif env.task == "dbexplore":  # a question about one world's database
                fp = _digest((p.text, json.dumps(env.world, sort_keys=True)))
            elif env.task == "salesforecast":
                fp = _digest(json.dumps(p.files, sort_keys=True))
            else:  # pragma: no cover - a new env with a train split must say what its problem is
                raise AssertionError(f"no problem fingerprint for {env.task}")
            out[inst.instance_id] = fp
    return out


def first_observations(env) -> dict[str, str]:
    env.reset(seed=0)
    out = {}
    for slot in env.order:
        obs, info = env.reset(options={"instance": slot.instance_id, "stateless": True})
        out[info["instance_id"]] = obs
    return out


@pytest.fixture(scope="module", params=TRAIN_ENVS)
def splits(request):
    test = gym.make(request.param).unwrapped  # split="test" is the default
    train = gym.make(request.param, split="train").unwrapped
    yield request.param, test, train
    test.close()
    train.close()


def test_instance_ids_disjoint(splits):
    env_id, test, train = splits
    test_ids = {i.instance_id for v in test.schedule.variants for i in v.instances}
    train_ids = {i.instance_id for v in train.schedule.variants for i in v.instances}
    assert test.split == "test" and train.split == "train"
    assert len(train_ids) == len(test_ids) == len(test.schedule)
    assert not test_ids & train_ids
    assert all(i.startswith("train-") for i in train_ids) and not any(i.startswith("train-") for i in test_ids)
    # same schedule shape: variants (and so drift points) in the same places; a variant's name may carry a
    # name the world drew (Poker's players)
    assert [len(v.instances) for v in train.schedule.variants] == [len(v.instances) for v in test.schedule.variants]
    drifts = [[d["variant"] for d in declared_drifts(env)] for env in (train, test)]
    assert [[variant_index(env, v) for v in names] for env, names in zip((train, test), drifts)] == \
        [[variant_index(test, v) for v in drifts[1]]] * 2


def variant_index(env, name: str) -> int:
    return [v.name for v in env.schedule.variants].index(name)


def test_problems_disjoint(splits):
    env_id, test, train = splits
    fp_test, fp_train = problem_fingerprints(test), problem_fingerprints(train)
    assert len(set(fp_test.values())) == len(fp_test)  # the fingerprint tells instances apart
    assert len(set(fp_train.values())) == len(fp_train)
    shared = set(fp_test.values()) & set(fp_train.values())
    assert not shared, f"{env_id}: {len(shared)} generated problems appear in both splits"


@pytest.mark.parametrize("env_id", OBSERVATION_ENVS)
def test_first_observations_disjoint(env_id):
    test, train = gym.make(env_id).unwrapped, gym.make(env_id, split="train").unwrapped
    obs_test, obs_train = first_observations(test), first_observations(train)
    assert len(obs_test) == len(obs_train) == len(test.schedule)
    shared = set(obs_test.values()) & set(obs_train.values())
    assert not shared, f"{env_id}: {len(shared)} first observations appear in both splits"


@pytest.mark.parametrize("env_id", ["clbench/SpectrumMonitor-v6", "clbench/Poker-v9"])
def test_train_split_is_deterministic_and_playable(env_id):
    a, b = gym.make(env_id, split="train").unwrapped, gym.make(env_id, split="train").unwrapped
    assert problem_fingerprints(a) == problem_fingerprints(b)
    from clbench.agent import make_agent
    from clbench.runner import play_instance

    obs, info = a.reset(seed=0)
    result = play_instance(a, make_agent("reference", a, seed=0), obs, info, [])
    assert result["error"] is None and info["instance_id"].startswith("train-")


@pytest.mark.parametrize("env_id,why", sorted(REFUSING.items()))
def test_envs_without_train_split_refuse(env_id, why):
    with pytest.raises(ValueError, match="has no train split") as exc:
        gym.make(env_id, split="train")
    assert why in str(exc.value)


def test_every_env_declares_its_train_split():
    """A new env either has its train split checked here (TRAIN_ENVS, with a problem fingerprint)
    or refuses it (`no_train_split`): a train split that still seeds from the YAML's own seeds
    would relabel benchmark problems as training ones."""
    import inspect
    from pathlib import Path

    import clbench.envs
    from clbench.registry import clbench_env_ids, env_class

    shipped = Path(clbench.envs.__path__[0]).resolve()  # not envs another test scaffolds elsewhere
    for env_id in clbench_env_ids():
        cls = env_class(env_id)
        if not Path(inspect.getfile(cls)).resolve().is_relative_to(shipped):
            continue
        assert (env_id in TRAIN_ENVS) != bool(cls.no_train_split), \
            f"{env_id}: add it to TRAIN_ENVS (seeding through split_seed) or set no_train_split"


def test_unknown_split_refused():
    with pytest.raises(ValueError, match="split must be one of"):
        gym.make("clbench/Poker-v9", split="validation")


def test_split_seed():
    test, train = gym.make("clbench/Poker-v9").unwrapped, gym.make("clbench/Poker-v9", split="train").unwrapped
    assert test.split_seed(50501) == 50501
    seeds = [train.split_seed(s) for s in range(50500, 50540)]
    assert len(set(seeds)) == len(seeds) and not set(seeds) & set(range(50500, 50540))
