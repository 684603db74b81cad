"""clbench inside SkyRL through `skyrl-gym` (`pip install clbench[skyrl]`).

skyrl-gym's interface is `BaseTextEnv`: built as `skyrl_gym.make(env_class, env_config=...,
extras=row)` from one dataset row, `init(prompt)` returns the chat prompt the model starts from,
`step(llm_output)` returns `BaseTextEnvStepOutput(observations=[{"role": "user", ...}], reward,
done, metadata)`; the rollout ends at `done` (or `max_turns`). `ClbenchTextEnv` is that interface
over one clbench rollout (registered as env class "clbench" by `register()`):

* a dataset row (`dataset_rows(...)`, the same fields SkyRL's datasets carry: `data_source`,
  `prompt`, `env_class`, `reward_spec`, `extras`) names the rollout: env id, split ("train" by
  default), schedule, rollout seed, unit ("instance" or "schedule") and instance id;
* `init(prompt)` puts the env at the instance (`reset(..., options={"instance": id, "stateless":
  True})`) and appends its first observation to the prompt (the row's prompt is the system
  message: the spec card's brief, reward and action grammar);
* `step(action)` steps the clbench env with the model's raw reply; reward is 0 on intermediate
  turns and the instance reward on the turn that ends the instance (so a rollout's return is the
  instance reward, as in clbench; in "schedule" rollouts each instance's reward is divided by the
  schedule length, so the return is the mean instance reward); `metadata` is clbench's info dict
  plus, at the end, the terminal observation (score and feedback);
* `get_metrics()` reports the instance rewards.

skyrl-gym itself ships no rollout loop (SkyRL's trainer runs `SkyRLGymGenerator.agent_loop` on
vLLM engines). `text_agent_loop(env, prompt, client, model)` is that loop's text path for any
OpenAI-compatible endpoint: init, then generate / step / append the observations until done or
`max_turns`; it is how the example and the tests drive the env.
"""
from __future__ import annotations

from typing import Any

try:
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError("clbench.adapters.skyrl needs skyrl-gym: pip install 'clbench[skyrl]'") from exc

from clbench.adapters.core import POOL, RolloutSpec, Session, rollout_specs, system_prompt

ENV_CLASS = "clbench"
ENTRY_POINT = "clbench.adapters.skyrl:ClbenchTextEnv"


def register(env_class: str = ENV_CLASS) -> None:
    """Register `ClbenchTextEnv` with skyrl-gym as `env_class` (idempotent)."""
    if env_class not in skyrl_gym.registry:
        skyrl_gym.register(id=env_class, entry_point=ENTRY_POINT)


def _get(cfg: Any, key: str, default=None):
    if cfg is None:
        return default
    if isinstance(cfg, dict):
        return cfg.get(key, default)
    try:  # omegaconf DictConfig / dataclass configs, as SkyRL passes them
        return cfg.get(key, default) if hasattr(cfg, "get") else getattr(cfg, key, default)
    except Exception:  # noqa: BLE001
        return getattr(cfg, key, default)


class ClbenchTextEnv(BaseTextEnv):
    """One clbench rollout (an instance, or a whole stateful schedule) as a skyrl-gym text env.

    `env_config` (per env class, shared by all rows): defaults for env_id, split, schedule and
    env_kwargs. `extras` (per dataset row): `rollout` (a `RolloutSpec` dict, see `dataset_rows`)
    or the same keys at top level; `max_turns` (default: the instance's step budget, or every
    instance's budget for a schedule).
    """

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        extras = dict(extras or {})
        row = dict(extras.get("rollout") or extras.get("extra_info", {}).get("rollout") or {})
        for key in ("env_id", "split", "schedule", "seed", "unit", "instance_id", "env_kwargs"):
            if key not in row:
                value = extras.get(key, _get(env_config, key))
                if value is not None:
                    row[key] = value
        if "env_id" not in row:
            raise ValueError("a clbench row names its env_id (see clbench.adapters.skyrl.dataset_rows)")
        row.setdefault("unit", "instance" if row.get("instance_id") is not None else "schedule")
        row["env_kwargs"] = dict(row.get("env_kwargs") or {})
        self.rollout = RolloutSpec.from_dict(row)
        self._env = POOL.take(self.rollout)
        self.session = Session(self.rollout, self._env)
        per_instance = self._env.max_steps
        n = 1 if self.rollout.unit == "instance" else len(self._env.schedule)
        self.max_turns = int(extras.get("max_turns") or per_instance * n)
        self._scale = 1.0 / n
        self._closed = False

    def init(self, prompt):
        """The row's prompt (system message) plus the instance's first observation as a user turn."""
        self.turns = 0
        first = self.session.start()
        prompt = list(prompt or [{"role": "system", "content": system_prompt(self._env)}])
        return prompt + [{"role": "user", "content": first}], {"instance_id": self.session.info["instance_id"]}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        turn = self.session.reply(action)
        metadata = dict(turn.info)
        reward = turn.reward * self._scale
        done = turn.done
        if not done and self.turns >= self.max_turns:  # SkyRL's turn cap: the unfinished instance scores 0
            self.session.end_incomplete()
            done = True
        if done:
            metadata["terminal_observation"] = self.session.terminal_observations.get(turn.info["instance_id"], "")
            metadata["clbench"] = self.session.summary()
            return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata=metadata)
        return BaseTextEnvStepOutput(observations=[{"role": "user", "content": turn.observation}], reward=reward,
                                     done=False, metadata=metadata)

    def get_metrics(self) -> dict[str, Any]:
        rewards = self.session.instance_rewards
        return {"instance_reward_mean": (sum(rewards.values()) / len(rewards)) if rewards else 0.0,
                "instances_finished": len(rewards), "steps": self.session.steps}

    def close(self):
        if not self._closed:
            self._closed = True
            POOL.give(self.rollout, self._env)


def write_parquet(rows: list[dict], path: str) -> str:
    """Write `dataset_rows(...)` as the parquet dataset SkyRL's trainer reads (pyarrow comes with
    `pip install clbench[skyrl]`); returns the path."""
    try:
        import pyarrow  # noqa: F401  pandas' parquet engine
    except ImportError:
        raise ImportError("writing parquet needs pyarrow: pip install 'clbench[skyrl]'") from None
    import pandas as pd

    pd.DataFrame([_no_empty_dicts(r) for r in rows]).to_parquet(path)
    return path


def _no_empty_dicts(value):
    """Parquet has no struct without fields: an empty mapping (env_kwargs {}) is written as null,
    which the env reads back as "none given"."""
    if isinstance(value, dict):
        return {k: _no_empty_dicts(v) for k, v in value.items()} or None
    if isinstance(value, list):
        return [_no_empty_dicts(v) for v in value]
    return value


def dataset_rows(env_id: str, *, split: str = "train", schedule: str = "default", seeds=(0,),
                 unit: str = "instance", instances=None, env_kwargs: dict | None = None,
                 env_class: str = ENV_CLASS) -> list[dict]:
    """SkyRL dataset rows (one per rollout; write them to parquet for SkyRL's trainer): the prompt
    is the system message; `extras`/`rollout` name the rollout; `reward_spec` says the reward is
    the env's own (clbench's instance reward)."""
    specs = rollout_specs(env_id, split=split, schedule=schedule, seeds=seeds, unit=unit, instances=instances,
                          env_kwargs=env_kwargs)
    if not specs:
        return []
    env = POOL.take(specs[0])
    try:
        system = system_prompt(env)
    finally:
        POOL.give(specs[0], env)
    rows = []
    for spec in specs:
        rollout = spec.to_dict()
        rows.append({"data_source": f"clbench/{env_id.split('/')[-1]}/{split}", "env_class": env_class,
                     "prompt": [{"role": "system", "content": system}],
                     "reward_spec": {"method": "env", "ground_truth": None},
                     "env_config": {"env_id": env_id}, "rollout": rollout, "instance_id": spec.instance_id,
                     "extra_info": {"rollout": rollout}})
    return rows


def text_agent_loop(env: BaseTextEnv, prompt: list[dict], client, model: str, *, sampling: dict | None = None,
                    max_turns: int | None = None) -> dict[str, Any]:
    """SkyRL's generator loop (text path) for an OpenAI-compatible `client`: `init`, then one chat
    completion per turn, `step`, observations appended to the chat history, until `done`.
    Returns the chat history, per-turn rewards, their sum (`reward`), turns and `done`."""
    chat, _ = env.init(prompt)
    chat = list(chat)
    rewards: list[float] = []
    done, turns = False, 0
    limit = max_turns or env.max_turns
    try:
        while not done and turns < limit:
            resp = client.chat.completions.create(model=model, messages=chat, **(sampling or {}))
            text = resp.choices[0].message.content or ""
            chat.append({"role": "assistant", "content": text})
            out = env.step(text)
            turns += 1
            rewards.append(float(out["reward"]))
            done = bool(out["done"])
            chat += list(out["observations"])
        metrics = env.get_metrics()
    finally:
        env.close()
    return {"chat": chat, "rewards": rewards, "reward": sum(rewards), "turns": turns, "done": done,
            "metrics": metrics}
