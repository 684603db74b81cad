"""Framework-free core of the training adapters: which instances a rollout plays and how a clbench
env is driven turn by turn through text messages.

A rollout unit is either
* "instance": one clbench instance, reached with `reset(seed=s, options={"instance": id,
  "stateless": True})` (environment state as in a stateful run at that instance, agent-written
  state fresh), so every rollout of an instance is the same problem; its return is the instance
  reward; or
* "schedule": a whole stateful schedule in one conversation (one agent lives through every
  instance, the continual-learning setting); its reward is the mean instance reward.

Training should use `split="train"` (the default here): those instances are drawn from other seeds
and share no instance id or problem with the benchmark (`split="test"`), see tests/test_split.py.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


UNITS = ("instance", "schedule")
#: what separates an instance's terminal feedback from the next instance in a schedule rollout
NEXT_INSTANCE = "\n\n--- next instance ---\n"


@dataclass(frozen=True)
class RolloutSpec:
    """One rollout: the env, the split, the schedule and rollout seed, and the unit played.

    `instance_id` names the instance of an "instance" rollout (None for "schedule").
    """

    env_id: str
    split: str = "train"
    schedule: str = "default"
    seed: int = 0
    unit: str = "instance"
    instance_id: str | None = None
    env_kwargs: dict = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self):
        if self.unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}, got {self.unit!r}")
        if (self.unit == "instance") != (self.instance_id is not None):
            raise ValueError("an 'instance' rollout names its instance_id; a 'schedule' rollout does not")

    def to_dict(self) -> dict:
        return {"env_id": self.env_id, "split": self.split, "schedule": self.schedule, "seed": self.seed,
                "unit": self.unit, "instance_id": self.instance_id, "env_kwargs": dict(self.env_kwargs)}

    @classmethod
    def from_dict(cls, data: dict) -> "RolloutSpec":
        return cls(**{k: data[k] for k in ("env_id", "split", "schedule", "seed", "unit", "instance_id")
                      if k in data}, env_kwargs=dict(data.get("env_kwargs") or {}))

    def env_key(self) -> tuple:
        return (self.env_id, self.split, self.schedule, repr(sorted(self.env_kwargs.items())))


def make_env(spec: RolloutSpec):
    """A fresh clbench env (unwrapped) for `spec`."""
    from clbench.runner import make_env as make

    return make(spec.env_id, schedule=spec.schedule, split=spec.split, **spec.env_kwargs).unwrapped


class EnvPool:
    """Idle clbench envs by configuration: a rollout borrows one (data built once per process),
    concurrent rollouts never share one. Envs are not thread-safe; each borrow is exclusive."""

    def __init__(self):
        self._idle: dict[tuple, list] = {}
        self._lock = threading.Lock()

    def take(self, spec: RolloutSpec):
        with self._lock:
            idle = self._idle.get(spec.env_key())
            if idle:
                return idle.pop()
        return make_env(spec)

    def give(self, spec: RolloutSpec, env) -> None:
        with self._lock:
            self._idle.setdefault(spec.env_key(), []).append(env)

    def close(self) -> None:
        with self._lock:
            envs = [e for idle in self._idle.values() for e in idle]
            self._idle.clear()
        for env in envs:
            try:
                env.close()
            except Exception:  # best effort
                pass


POOL = EnvPool()


def rollout_specs(env_id: str, *, split: str = "train", schedule: str = "default", seeds=(0,),
                  unit: str = "instance", instances=None, env_kwargs: dict | None = None) -> list[RolloutSpec]:
    """The rollouts of a training (or evaluation) set: for "instance", one per instance of each
    rollout seed's order (or only `instances`: ids or positions); for "schedule", one per seed."""
    env_kwargs = dict(env_kwargs or {})
    if unit == "schedule":
        return [RolloutSpec(env_id, split, schedule, int(s), "schedule", None, env_kwargs) for s in seeds]
    env = make_env(RolloutSpec(env_id, split, schedule, 0, "schedule", None, env_kwargs))
    try:
        out = []
        for s in seeds:
            order = env.schedule.order(int(s))
            ids = [slot.instance_id for slot in order]
            if instances is not None:
                bad = [i for i in instances if isinstance(i, int) and not 0 <= i < len(order)]
                if bad:
                    raise ValueError(f"instance positions {bad} out of range 0..{len(order) - 1}")
                ids = [order[i].instance_id if isinstance(i, int) else i for i in instances]
                unknown = set(ids) - {slot.instance_id for slot in order}
                if unknown:
                    raise ValueError(f"unknown instance ids {sorted(unknown)} in {env_id} split {split!r}")
            out += [RolloutSpec(env_id, split, schedule, int(s), "instance", i, env_kwargs) for i in ids]
        return out
    finally:
        env.close()


def system_prompt(env) -> str:
    """What the model is told about the task: brief, reward and action grammar (from the agent card)."""
    card = env.unwrapped.agent_card
    return (f"{card['brief']}\n\nReward: {card['reward']}\n\nAfter each instance: {card['feedback']}\n\n"
            f"Actions: {card['action_grammar']}")


@dataclass
class Turn:
    """What the env says after one model reply."""

    observation: str  # the next user message ("" when the rollout is over)
    reward: float  # the step's reward (instance reward on an instance's last step, else 0)
    done: bool  # the rollout is over
    info: dict


class Session:
    """Drives one rollout of a clbench env with text: `start()` gives the first user message;
    `reply(text)` steps the env with the model's raw reply and gives the next message.

    "instance": done when the instance ends (return = the instance reward). "schedule": when an
    instance ends its terminal observation (score and feedback) and the next instance's first
    observation form the next message; done after the last instance. `instance_rewards` maps every
    finished instance id to its reward; `reward` is the rollout's reward (instance reward, or the
    mean over the schedule's instances).
    """

    def __init__(self, spec: RolloutSpec, env=None):
        self.spec = spec
        self.env = env if env is not None else make_env(spec)
        self.instance_rewards: dict[str, float] = {}
        self.terminal_observations: dict[str, str] = {}
        self.steps = 0
        self.done = False
        self.info: dict = {}

    @property
    def system_prompt(self) -> str:
        return system_prompt(self.env)

    def start(self) -> str:
        if self.spec.unit == "instance":
            obs, info = self.env.reset(seed=self.spec.seed,
                                       options={"instance": self.spec.instance_id, "stateless": True})
        else:
            obs, info = self.env.reset(seed=self.spec.seed)
        self.info = info
        return obs

    def reply(self, text: str) -> Turn:
        if self.done:
            raise RuntimeError("the rollout is over")
        obs, reward, terminated, truncated, info = self.env.step(text if isinstance(text, str) else str(text))
        self.steps += 1
        self.info = info
        if not (terminated or truncated):
            return Turn(obs, 0.0, False, info)
        iid = info["instance_id"]
        self.instance_rewards[iid] = float(reward)
        self.terminal_observations[iid] = obs
        if self.spec.unit == "schedule" and info["position"] + 1 < len(self.env.schedule):
            nxt, self.info = self.env.reset()
            return Turn(obs + NEXT_INSTANCE + nxt, float(reward), False, info)
        self.done = True
        return Turn("", float(reward), True, info)

    def end_incomplete(self) -> None:
        """The model stopped before the rollout ended: the unfinished instance scores 0."""
        if not self.done and self.info.get("instance_id") is not None:
            self.instance_rewards.setdefault(self.info["instance_id"], 0.0)
        self.done = True

    @property
    def reward(self) -> float:
        if not self.instance_rewards:
            return 0.0
        if self.spec.unit == "instance":
            return next(iter(self.instance_rewards.values()))
        return sum(self.instance_rewards.values()) / len(self.env.schedule)

    def summary(self) -> dict[str, Any]:
        return {"spec": self.spec.to_dict(), "reward": self.reward, "steps": self.steps,
                "instance_rewards": dict(self.instance_rewards), "completed": self.done}
