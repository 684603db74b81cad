"""Memoryless policy families of MemoryProbe-v2 for the red team (`MemoryProbeEnv.policy_families`).

Each family reads only the session in view (every phrasing, like the reference), answers what
it states, and for every other question uses a prior a memoryless agent has instead of
abstaining: the value domains of the public vocabulary (the first, middle or last value), the
values said in view for keys of the same kind, or the value of the most similar key in view
(a near-identical name). None keeps anything across sessions. Since a wrong answer costs what
a right one earns, each guess loses in expectation, so none may reach the stateless reference.
"""
from __future__ import annotations

from collections import Counter

from clbench.agent import Agent
from clbench.agents.memoryprobe import extract, lookup, parse_observation, reply, resolve
from clbench.envs.memoryprobe import vocabulary as V
from clbench.envs.memoryprobe.text import normalize_key


def _values(kind: str, params) -> list[str]:
    """Every value of a domain, in the vocabulary's order."""
    if kind == "int":
        lo, hi, step = params
        return [str(v) for v in range(lo, hi + 1, step)]
    if kind == "int_unit":
        lo, hi, step, unit, _ = params
        return [f"{v}{unit}" for v in range(lo, hi + 1, step)]
    if kind == "decimal_unit":
        lo, hi, unit = params
        return [f"{v / 10:.1f}{unit}" for v in range(round(lo * 10), round(hi * 10) + 1)]
    if kind == "choice":
        return list(params)
    return [f"{f} {last}" for f in V.FIRST_NAMES for last in V.LAST_NAMES]  # person


#: (the words that name a kind of key, its domain) from the public vocabulary, longest names first
_KINDS = sorted(
    [(name, _values(kind, params)) for name, kind, params in V.CONFIG_PARAMS + V.MEASUREMENT_METRICS]
    + [(topic, list(opts)) for topic, opts in V.DECISION_TOPICS]
    + [(role, _values("person", ())) for role in V.ENTITY_ROLES]
    + [(q, _values("int", (lo, hi, 1))) for q, (lo, hi), _ in V.ACCUMULATORS],
    key=lambda item: -len(item[0]))


def kind_of(key: str) -> tuple[str, list[str]] | None:
    """The kind of key (its parameter, metric, topic, role or quantity) and its value domain."""
    norm = normalize_key(key)
    return next(((name, values) for name, values in _KINDS if normalize_key(name) in norm), None)


class MemorylessGuesser(Agent):
    """Answers what the session in view states; `guess` fills in every other question."""

    name = "memoryless-guesser"
    deterministic = True

    def act(self, observation: str, info: dict) -> str:
        text, questions = parse_observation(observation)
        table = resolve(extract(text, complete=True))
        answers = {qid: lookup(table, key, exact=True) or self.guess(key, table) for qid, key in questions}
        return reply(answers, [q for q, _ in questions])

    def guess(self, key: str, table: dict) -> str | None:
        return None


class DomainGuess(MemorylessGuesser):
    """Guesses the `index`-th value of the key's public domain (0, "mid" or -1)."""

    name = "domain-guess"

    def __init__(self, card, seed: int = 0, latent=None, index=0):
        super().__init__(card, seed=seed, latent=latent)
        self.index = index

    def guess(self, key, table):
        found = kind_of(key)
        if not found:
            return None
        values = found[1]
        return values[len(values) // 2] if self.index == "mid" else values[int(self.index)]


class SameKindInView(MemorylessGuesser):
    """Guesses the most frequent value said in view for keys of the same kind; else `fallback`."""

    name = "same-kind-in-view"

    def __init__(self, card, seed: int = 0, latent=None, fallback: str = "abstain"):
        super().__init__(card, seed=seed, latent=latent)
        self.fallback = fallback

    def guess(self, key, table):
        kind = kind_of(key)
        same = Counter(e["value"] for e in table.values() if e["base"] and kind and kind_of(e["key"]) == kind)
        if same:
            return same.most_common(1)[0][0]
        return kind[1][0] if kind and self.fallback == "first" else None


class NearestKeyInView(MemorylessGuesser):
    """Answers with the value of the most similar key in view (a near-identical name)."""

    name = "nearest-key-in-view"

    def __init__(self, card, seed: int = 0, latent=None, threshold: float = 0.8):
        super().__init__(card, seed=seed, latent=latent)
        self.threshold = float(threshold)

    def guess(self, key, table):
        return lookup(table, key, threshold=self.threshold)


def family_means(env_id: str, env_kwargs: dict | None = None) -> dict[str, float]:
    """Stateless mean of every point of the env's policy-family grids ("family?param=value")."""
    import itertools

    from clbench.agent import make_agent
    from clbench.runner import make_env, play_instance

    env = make_env(env_id, **(env_kwargs or {}))
    try:
        base = env.unwrapped
        ids = [slot.instance_id for slot in base.schedule.order(0)]
        means = {}
        for family, (path, grid) in base.policy_families.items():
            for combo in itertools.product(*grid.values()):
                params = dict(zip(grid, combo))
                rewards = []
                for iid in ids:
                    agent = make_agent(path, env, **params)
                    obs, info = env.reset(seed=0, options={"instance": iid, "stateless": True})
                    rewards.append(play_instance(env, agent, obs, info, [])["reward"])
                label = "&".join(f"{k}={v}" for k, v in params.items())
                means[f"{family}?{label}"] = sum(rewards) / len(rewards)
        return means
    finally:
        env.close()
