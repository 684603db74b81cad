"""The base class of every clbench environment: a stateful sequence of instances.

One Gymnasium episode is one instance. `reset(seed=s)` starts rollout `s` (instances permuted
within variants by `s`); `reset()` moves on to the next instance; `reset(options={"instance": x,
"stateless": True})` jumps to instance `x` with the environment as a stateful run would have it
there and agent-written state wiped. See docs/contract.md for the whole contract.

A domain subclasses `InstanceSequenceEnv` and implements four hooks:
  `_build_schedule(name)`, `_enter(slot, fresh)`, `_act(call)` and optionally `_parse_text(text)`.
"""
from __future__ import annotations

import copy
import hashlib
import importlib.resources
import pickle
import re
import string
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import gymnasium as gym
import yaml
from gymnasium import spaces
from gymnasium.error import CustomSpaceError
from gymnasium.vector.utils import create_shared_memory

from clbench.feedback import score_report
from clbench.actions import ActionError, ToolCall, as_tool_call, extract_json, validate_call
from clbench.schedule import Instance, Schedule, Slot, Variant

# Everything an env emits is printable ASCII; anything else is escaped by `sanitize`.
CHARSET = string.printable
_OUTSIDE = re.compile("[^" + re.escape(CHARSET) + "]")
_CHARSET_BYTES = CHARSET.encode("ascii")
MAX_OBS_CHARS = 200_000
#: `split` values of every env: the benchmark's instances, and training instances from other seeds
SPLITS = ("test", "train")
MAX_ACTION_CHARS = 100_000
#: lone surrogates (from JSON escapes such as "\ud800") have no UTF-8 encoding
_NOT_UTF8 = re.compile("[\ud800-\udfff]")
#: what parsing an action in a text grammar may raise besides ActionError; step() turns it into one
PARSE_ERRORS = (ValueError, TypeError, OverflowError, RecursionError, UnicodeError)


def sanitize(text: str, limit: int = MAX_OBS_CHARS) -> str:
    """Escape characters outside CHARSET (as \\uXXXX) and cap the length with a note."""
    # deleting every CHARSET byte leaves nothing for clean text: several times faster than the regex
    if not (text.isascii() and not text.encode("ascii").translate(None, _CHARSET_BYTES)):
        text = _OUTSIDE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    if len(text) > limit:
        note = f"\n[... output truncated: {len(text) - limit + 200} characters omitted]"
        text = text[: limit - 200] + note
    return text or " "


def task_name(env_id: str) -> str:
    """A task's one name from its env id: "clbench/DBExplore-v3" -> "dbexplore"."""
    return env_id.split("/")[-1].rsplit("-v", 1)[0].lower()


def task_spec_path(task: str, name: str = "default") -> Path:
    """tasks/<task>/<name>.yaml: in the installed package data, else in a $CLBENCH_PATH root."""
    import clbench.tasks  # importing clbench puts $CLBENCH_PATH's tasks/ folders on its __path__

    for folder in [Path(str(importlib.resources.files("clbench.tasks"))), *map(Path, clbench.tasks.__path__[1:])]:
        if (folder / task / f"{name}.yaml").is_file():
            return folder / task / f"{name}.yaml"
    raise FileNotFoundError(f"no task spec {task}/{name}.yaml in clbench.tasks")


@cache
def load_task_spec(task: str, name: str = "default") -> dict:
    """Read tasks/<task>/<name>.yaml (`task_spec_path`)."""
    # libyaml's parser when present (10x faster); the same safe constructor, so the same data
    return yaml.load(task_spec_path(task, name).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def is_calibrated(spec: dict) -> bool:
    """Whether a task spec holds r_max and r_reference (`clbench calibrate --env ID --write`)."""
    return spec.get("r_max") is not None and spec.get("r_reference") is not None


_NUMBERS = (int, float, bool, type(None))


def _check_text(value) -> None:
    """Encode every string inside `value` (keys too); UnicodeEncodeError on a lone surrogate."""
    if isinstance(value, str):
        if not value.isascii():
            value.encode("utf-8")
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_text(k)
            _check_text(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _check_text(v)


def _require_unicode(call: ToolCall) -> None:
    """Refuse arguments with lone surrogates (JSON's "\\ud800"): no shell, file or database takes them."""
    args = call.arguments
    if type(args) is dict:  # the usual call: flat ASCII strings and numbers, checked without a call per value
        for k, v in args.items():
            if not (type(k) is str and k.isascii() and (type(v) is str and v.isascii() or type(v) in _NUMBERS)):
                break
        else:
            return
    try:
        _check_text(args)
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start:exc.end]
        raise ActionError(f"tool {call.tool!r}: the arguments contain \\u{ord(bad[0]):04x}, a lone surrogate "
                          "that is not valid Unicode text") from None


class TextSpace(spaces.Text):
    """`spaces.Text` over CHARSET. AsyncVectorEnv's shared memory would freeze text observations
    into '0000' strings, so shared memory is refused with a message saying what to do instead."""

    def contains(self, x: Any) -> bool:
        """`spaces.Text.contains` with one set operation instead of a generator step per character (gym's
        env checker asks it of the first observations of every env)."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length and self.character_set.issuperset(x)


@create_shared_memory.register(TextSpace)
def _no_shared_text(space, n: int = 1, ctx=None):
    raise CustomSpaceError(
        "clbench observations are text and cannot live in shared memory: use "
        "gym.make_vec(id, num_envs, vectorization_mode='async', vector_kwargs={'shared_memory': False}) "
        "or vectorization_mode='sync'")


#: ids of envs whose members are being test-pickled (guards __getstate__ against recursion)
_PICKLING: set[int] = set()


class ScheduleExhausted(RuntimeError):
    """reset() was called after the last instance of a schedule (make the env with cycle=True to wrap)."""


@dataclass
class Outcome:
    """What an env hook returns for one action.

    done=True ends the instance with `reward`; `raw_metric` is (name, value) in the task's
    native unit. costs_step=False for actions that must not use up budget (e.g. illegal moves).
    """

    observation: str
    done: bool = False
    reward: float = 0.0
    raw_metric: tuple[str, float] | None = None
    solved: bool | None = None
    costs_step: bool = True
    invalid: bool = False
    extra: dict = field(default_factory=dict)


class SpecCard(dict):
    """What an agent (and a researcher) is told about a task: a plain JSON object.

    A `dict` so that `json.dumps(env.unwrapped.spec_card)` works as is; the fields are also read
    as attributes (`card.brief`). Fields: env_id, task, brief, reward, feedback (what the agent is
    told when an instance ends), action_grammar, r_max, r_reference, instances, max_steps,
    variants, tools, schedule.
    """

    FIELDS = ("env_id", "task", "brief", "reward", "feedback", "action_grammar", "r_max", "r_reference",
              "instances", "max_steps", "variants", "tools", "schedule")

    def __init__(self, **fields: Any):
        missing, unknown = set(self.FIELDS) - set(fields), set(fields) - set(self.FIELDS)
        if missing or unknown:
            raise TypeError(f"SpecCard fields missing {sorted(missing)}, unknown {sorted(unknown)}")
        super().__init__((k, fields[k]) for k in self.FIELDS)

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a SpecCard's fields are items: card[name] = value")

    def __reduce__(self):  # copy and pickle through the keyword constructor
        return (_spec_card, (dict(self),))

    def to_dict(self) -> dict:
        """A deep, plain-dict copy."""
        return copy.deepcopy(dict(self))


def _spec_card(fields: dict) -> SpecCard:
    return SpecCard(**fields)


class InstanceSequenceEnv(gym.Env):
    """Base for stateful instance sequences. Subclasses set the class attributes below."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}
    #: "clbench/<Name>-v<N>"; everything else about the task's name follows from it
    env_id: str = ""
    #: the task's one name, derived from env_id: "clbench/DBExplore-v3" -> "dbexplore". It names the
    #: env package (envs/<task>/), its data (tasks/<task>/), its agents (agents/<task>.py) and the
    #: records' `task` field
    task: str = ""
    brief: str = ""
    reward_text: str = ""
    #: what the terminal observation tells the agent, and why that much (the feedback policy)
    feedback_text: str = ""
    action_grammar: str = ""
    #: the unit of the instance reward, shown in every table ("IoU", "BB per hand", ...)
    reward_unit: str = "reward"
    invalid_action_costs_step: bool = True
    #: consecutive invalid actions before `_on_invalid_cap` ends (or resolves) the instance
    max_invalid_repeats: int = 3
    #: scripted agents by name -> "module:Class" (random, reference, oracle)
    agents: dict[str, str] = {}
    #: fixed replies the degenerate agent `fixed:NAME` plays (clbench.agents.degenerate): the constant
    #: answers an adversary would try first; none may beat the stateless reference
    degenerate_answers: dict[str, str] = {}
    #: whether an interrupted stateful rollout resumes from its checkpoint; False for envs whose
    #: agent-written state (e.g. a workspace) is not in the agent's state_dict: the rollout restarts
    resumable: bool = True
    #: part of `clbench suite`'s default task list; diagnostic envs say False and join with --tasks
    suite: bool = True
    #: what `clbench containers build` prepares for this env (images, sandbox runtimes); "" = nothing,
    #: otherwise `build_runtime` does it
    runtime: str = ""
    #: why this env has no `split="train"` (None: it has one); `__init__` raises ValueError with it
    no_train_split: str | None = None
    #: True when every latent value comes from the spec or `world_rng` and only the instances' noise from
    #: `draw_seed`, so `redeal=K` gives other instances of the same world
    redealable: bool = False
    #: deals of its instances the benchmark plays (redealable envs): rollout seed s plays deal s % deals,
    #: so the default run's rollouts each play their own cards and a score averages over `deals` of them
    #: where one deal's luck would swamp the skill (Poker); 1: every rollout plays the same instances
    deals: int = 1
    #: rough wall seconds of one instance played by a scripted agent (order of magnitude): the runner
    #: starts the jobs with the most instances x seconds first, so the cheap ones fill the workers' tails
    instance_seconds: float = 0.01

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.env_id:
            cls.task = task_name(cls.env_id)

    def __init__(self, schedule: str = "default", cycle: bool = False, render_mode: str | None = None,
                 split: str = "test", world_seed: int | None = None, redeal: int = 0):
        """`split="test"` (the default) is the benchmark. `split="train"` builds the same schedule
        (variants, kinds of latent structure, kinds of drift) in another world, for training; its
        instance ids start with "train-" and it shares no instance, answer or latent value with the
        test split (tests/test_split.py).

        `world_seed=None` (the default) is the canonical world, the one published numbers refer to.
        `world_seed=N` draws a fresh world of the same kind and difficulty: every latent value (schema
        conventions, band plan, opponents' parameters, effects, codings, facts, ...) is drawn from
        `world_rng` / `draw_seed`, so a model that memorised this repository gains nothing there.
        Train worlds, the canonical world and fresh worlds never coincide (`world_key`).

        `redeal=K` (K >= 1; envs with `redealable = True` only) keeps the world's latent structure and
        deals its instances anew (`draw_seed`): independent draws of the same world, on which the red
        team chooses its policies' parameters before it plays them on the benchmark's own instances."""
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if split == "train" and self.no_train_split:
            raise ValueError(f"{self.env_id} has no train split: {self.no_train_split}")
        self.split = split
        if world_seed is not None and (isinstance(world_seed, bool) or int(world_seed) < 0):
            raise ValueError(f"world_seed must be None (the canonical world) or an integer >= 0, got {world_seed!r}")
        self.world_seed = None if world_seed is None else int(world_seed)
        if isinstance(redeal, bool) or int(redeal) < 0:
            raise ValueError(f"redeal must be an integer >= 0, got {redeal!r}")
        if redeal and not self.redealable:
            raise ValueError(f"{self.env_id} cannot re-deal: its latent structure is drawn with its instances")
        self.redeal = int(redeal)
        self._deal = 0  # which of this copy's `deals` the schedule holds (rollout seed % deals)
        self.render_mode = render_mode
        self.schedule_name = schedule
        self.cycle = cycle
        self.spec_data = load_task_spec(self.task)
        #: steps per instance: `max_steps` in tasks/<task>/default.yaml is the one place it is set
        self.max_steps = int(self.spec_data["max_steps"]) if "max_steps" in self.spec_data else 0
        if self.max_steps < 1:
            raise ValueError(f"tasks/{self.task}/default.yaml must set max_steps (steps per instance) >= 1")
        self.schedule: Schedule = self._split_ids(self._build_schedule(schedule))
        self.observation_space = TextSpace(max_length=MAX_OBS_CHARS, min_length=1, charset=CHARSET)
        self.action_space = TextSpace(max_length=MAX_ACTION_CHARS, min_length=0, charset=CHARSET)
        self.rollout_seed: int | None = None
        self._order: list[Slot] = []
        self._pos = -1
        self._slot: Slot | None = None
        self._step_count = 0
        self._invalid_streak = 0
        self._done = True
        self._last_obs = ""

    # ------------------------------------------------------------------ worlds: canonical, train, fresh
    @property
    def world_key(self) -> str:
        """Names the world this env plays: "canonical" (test split, no world seed), "train",
        "world-N" (a fresh test world) or "train-world-N". Every latent draw is keyed by it."""
        if self.world_seed is None:
            return "canonical" if self.split == "test" else self.split
        return f"world-{self.world_seed}" if self.split == "test" else f"{self.split}-world-{self.world_seed}"

    @property
    def canonical_world(self) -> bool:
        """Whether this is the benchmark's canonical world (tasks/<task>/default.yaml as written)."""
        return self.world_key == "canonical"

    def _world_digest(self, what: str) -> int:
        digest = hashlib.sha256(f"clbench/{self.task}/{self.world_key}/{what}".encode()).digest()
        return int.from_bytes(digest[:8], "big")

    @property
    def deal_key(self) -> str:
        """`world_key`, plus "/redeal-K" for a re-deal: names the instances played (calibration cache,
        reports), where `world_key` names the latent structure."""
        return self.world_key + (f"/redeal-{self.redeal}" if self.redeal else "")

    @property
    def deal_index(self) -> int:
        """Which deal of the world's instances the schedule holds: re-deal K's copy of the benchmark's
        `deals` deals, at the one the current rollout seed plays (0: the world's own instances)."""
        return self.redeal * self.deals + self._deal

    def draw_seed(self, seed: int) -> int:
        """The generator seed to use for `seed` (a seed from tasks/<task>/default.yaml): `seed` itself
        in the canonical world's first deal; in any other world or deal (another rollout seed's deal,
        `redeal=K`), a deterministic seed derived from the task, the world, the deal and `seed` (never
        equal to `seed`), so its instances are other draws of the same generator."""
        seed, n = int(seed), self.deal_index
        if self.canonical_world and not n:
            return seed
        what = f"seed/{seed}" + (f"/redeal/{n}" if n else "")
        derived = self._world_digest(what) & 0x7FFFFFFF
        return derived if derived != seed else derived ^ 1

    #: the name earlier code used for `draw_seed`
    split_seed = draw_seed

    def world_rng(self, purpose: str) -> "np.random.Generator":
        """A numpy Generator for drawing latent structure named `purpose` ("band-plan", "opponents",
        ...) in this world. The canonical world keeps its written values and should not call this
        for them; every other world draws them here, so train, canonical and fresh worlds differ."""
        import numpy as np

        return np.random.default_rng(self._world_digest(f"rng/{purpose}"))

    def _split_ids(self, schedule: Schedule) -> Schedule:
        """Test: the schedule as built. Train: every instance id prefixed with "train-"."""
        if self.split == "test":
            return schedule
        variants = [Variant(v.name, tuple(Instance(f"{self.split}-{i.instance_id}", i.variant, i.payload)
                                          for i in v.instances), v.description) for v in schedule.variants]
        return type(schedule)(schedule.name, variants)

    # ------------------------------------------------------------------ hooks for subclasses
    def _build_schedule(self, name: str) -> Schedule:
        raise NotImplementedError

    def _enter(self, slot: Slot, fresh: bool) -> str:
        """Put the world in the state it has at `slot` and return the first observation.

        fresh=True: agent-written state (workspace, files) starts empty (new rollout or a
        stateless jump). Environment state (e.g. a migrated database) depends on the slot only.
        """
        raise NotImplementedError

    def _act(self, call: ToolCall) -> Outcome:
        raise NotImplementedError

    def _parse_text(self, text: str) -> ToolCall:
        """Parse a plain-text reply in the env's grammar; raise ActionError if it is not one."""
        raise ActionError(f"could not parse the action. {self.action_grammar}")

    def _on_invalid_cap(self) -> Outcome:
        """Called after `max_invalid_repeats` invalid actions in a row; default ends with 0."""
        return Outcome(
            f"Too many invalid actions in a row ({self.max_invalid_repeats}); the instance ends with reward 0.\n"
            + score_report(0.0, f"{self.max_invalid_repeats} invalid actions in a row score 0"),
            done=True, reward=0.0, solved=False,
        )

    def _on_budget_exhausted(self) -> Outcome:
        """Called when the step budget runs out before the instance ended; default reward 0."""
        return Outcome(f"Step budget of {self.max_steps} used up; the instance ends with reward 0.\n"
                       + score_report(0.0, "an instance not finished within its step budget scores 0"),
                       done=True, reward=0.0, solved=False)

    #: memoryless policy families the red team searches (`clbench redteam`): name ->
    #: ("module:Class", {parameter: [values, ...]}); the class is an Agent that reads observations
    #: only and keeps nothing across instances; the red team plays every point of the grid
    #: stateless and fails the env when any reaches r_reference (docs/contract.md, "Honest scores").
    #: A third element "stateful" (or {"stateful": True, "full_grid": {...}}, or a
    #: clbench.redteam.PolicyFamily) marks a family played as one stateful rollout (e.g. an env's own
    #: feedback-only memorizer) and gives the larger grid searched with CLBENCH_SLOW=1 / --full
    policy_families: dict[str, tuple] = {}

    #: modules of this env's package (names relative to it, e.g. "cards", or full module names) that
    #: hold no ground truth, so scripted reference and red-team agents may import them (card
    #: parsing, a hand-strength table, a text grammar); every other module of clbench.envs.<task> is
    #: out of their reach (tests/test_reference_imports.py)
    public_modules: tuple[str, ...] = ()

    @classmethod
    def public_secrets(cls) -> list[str]:
        """Latent values of the canonical world (names, units, codes, frequencies, opponents'
        parameters, effects, codings, facts) as the strings they would appear as in text. None may
        appear in any public text: README, docs, docstrings, YAML comments, the agent card, tool
        descriptions, error messages (tests/test_public_text.py)."""
        return []

    def latent(self) -> Any:
        """Ground truth for privileged (oracle) agents only; never part of an observation."""
        raise NotImplementedError(f"{self.env_id} exposes no latent structure")

    def instance_facts(self, instance_id: str) -> list[dict] | None:
        """The latent facts instance `instance_id` needs, for the runner's probe ladder
        (clbench.probes) only, never shown to agents: dicts with `key`, `text` (what to inject) and
        `mentions` (dicts whose `text` is how a memory would state the fact). None: this env does not
        know them, and the probe ladder refuses it (see `knows_facts`)."""
        return None

    @classmethod
    def knows_facts(cls) -> bool:
        """Whether the env implements `instance_facts` (the probe ladder needs it)."""
        return cls.instance_facts is not InstanceSequenceEnv.instance_facts

    @classmethod
    def score_parts(cls, details: dict | None) -> dict[str, tuple[float, float]]:
        """Named parts of one instance's score as (points, out of), read from its record's
        `details` (the final info's). `clbench drift-check` reports a drift's cost per part, so a
        score that mixes knowledge a drift makes wrong with knowledge it leaves alone shows both
        (MemoryProbe: questions about superseded facts apart from the rest). {}: no parts."""
        return {}

    @classmethod
    def build_runtime(cls, *, offline_base: bool = False, force: bool = False, bwrap: bool = True,
                      docker: bool = True) -> None:
        """Prepare what `runtime` names (called by `clbench containers build`); raise
        clbench.sandbox.BuildError with what failed. Only envs with a `runtime` override it."""
        raise NotImplementedError(f"{cls.env_id} declares no runtime to build")

    @property
    def tools(self) -> list[dict]:
        """The env's tools as OpenAI function-calling JSON schemas."""
        return []

    # ------------------------------------------------------------------ public API
    @property
    def calibrated(self) -> bool:
        """Whether this world and schedule have r_max and r_reference (default.yaml for the canonical
        default, `clbench calibrate --env ID --write`; the calibration cache otherwise)."""
        return self.r_max is not None and self.r_reference is not None

    @property
    def baselines_from_spec(self) -> bool:
        """Whether default.yaml's r_max and r_reference apply: the canonical world's default schedule."""
        return self.canonical_world and self.schedule_name == "default" and not self.redeal

    def _baseline(self, name: str) -> float | None:
        if self.baselines_from_spec:
            value = self.spec_data.get(name)
        else:  # another world or schedule: its own calibration, cached (clbench.calibration), never borrowed
            from clbench.calibration import cached_baseline

            value = cached_baseline(self, name)
        return None if value is None else float(value)

    @property
    def r_max(self) -> float | None:
        """Mean reward of the oracle on this world and schedule; None until it is calibrated."""
        return self._baseline("r_max")

    @property
    def r_reference(self) -> float | None:
        """Mean reward of the stateless reference on this world and schedule; None until calibrated."""
        return self._baseline("r_reference")

    @property
    def r_max_se(self) -> float | None:
        """Standard error of r_max where the oracle's score is itself noisy (the task's default.yaml has
        `r_max_se`: Poker), this world's own (the calibration cache keeps each world's); else None."""
        return self._baseline("r_max_se") if "r_max_se" in self.spec_data else None

    @property
    def spec_card(self) -> SpecCard:
        say = self.say
        return SpecCard(
            env_id=self.env_id, task=self.task, brief=say(self.brief), reward=say(self.reward_text),
            feedback=say(self.feedback_text), action_grammar=say(self.action_grammar), r_max=self.r_max,
            r_reference=self.r_reference,
            instances=len(self.schedule), max_steps=self.max_steps, variants=self.schedule.describe(),
            tools=self.tools, schedule=self.schedule.name,
        )

    @property
    def agent_card(self) -> dict:
        """What an agent may be shown: its brief, the reward, the feedback policy, the action grammar,
        the step budget and the tools. It states nothing about when or what a drift is, nor any latent
        value; `spec_card` adds documentation for people (variants, baselines, schedule)."""
        say = self.say
        return {"env_id": self.env_id, "task": self.task, "brief": say(self.brief), "reward": say(self.reward_text),
                "feedback": say(self.feedback_text), "action_grammar": say(self.action_grammar),
                "max_steps": self.max_steps, "tools": self.tools,
                # how many instances the run has (the LLM agent's "Instance k of n"): no drift, no latent
                "instances": len(self.schedule)}

    def say(self, text: str) -> str:
        """`text` with "{max_steps}" filled in, so the budget is stated where it is set (default.yaml)."""
        return text.replace("{max_steps}", str(self.max_steps))

    @property
    def slot(self) -> Slot | None:
        """The current instance at its place in this rollout (None before the first reset)."""
        return self._slot

    @property
    def order(self) -> list[Slot]:
        return list(self._order)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        options = dict(options) if options else {}
        unknown = set(options) - {"instance", "stateless"} if options else None
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; known: instance, stateless")
        fresh = False
        if seed is not None or not self._order:
            super().reset(seed=seed)
            self.rollout_seed = int(seed or 0)
            if self.rollout_seed < 0:
                raise ValueError("rollout seed must be >= 0")
            if self.deals > 1 and self.rollout_seed % self.deals != self._deal:  # this rollout's own cards
                self._deal = self.rollout_seed % self.deals
                self.schedule = self._split_ids(self._build_schedule(self.schedule_name))
            self._order = self.schedule.order(self.rollout_seed)
            self._pos, fresh = 0, True
        elif "instance" not in options:
            if self._pos + 1 >= len(self._order):
                if not self.cycle:
                    raise ScheduleExhausted(
                        f"{self.env_id}: all {len(self._order)} instances of schedule {self.schedule.name!r} "
                        "are done; call reset(seed=...) for a new rollout or make the env with cycle=True")
                self._pos = 0
            else:
                self._pos += 1
        if "instance" in options:
            self._pos = self._find(options["instance"])
            fresh = fresh or bool(options.get("stateless", False))
        self._slot = self._order[self._pos]
        self._step_count = 0
        self._invalid_streak = 0
        self._done = False
        self._last_obs = sanitize(self._enter(self._slot, fresh))
        return self._last_obs, self._info()

    def step(self, action: str):
        if self._done or self._slot is None:
            raise gym.error.ResetNeeded("the instance has ended; call reset() for the next instance")
        try:
            if not isinstance(action, str):
                raise ActionError(f"actions are strings, got {type(action).__name__}")
            try:
                call = self.parse_action(action)
            except ActionError:
                raise
            except PARSE_ERRORS as exc:  # e.g. int() of a 5,000-digit number in a text grammar
                raise ActionError(f"could not parse the action ({type(exc).__name__}: {str(exc)[:200]}). "
                                  f"{self.action_grammar}") from None
            _require_unicode(call)
            outcome = self._act(call)
        except ActionError as exc:
            outcome = Outcome(f"Invalid action: {exc}", invalid=True,
                              costs_step=self.invalid_action_costs_step)
        if outcome.invalid:
            self._invalid_streak += 1
            if self._invalid_streak >= self.max_invalid_repeats and not outcome.done:
                capped = self._on_invalid_cap()
                capped.observation = outcome.observation + "\n" + capped.observation
                outcome = capped
                self._invalid_streak = 0  # the cap acted (e.g. folded for the agent): count afresh
        else:
            self._invalid_streak = 0
        if outcome.costs_step or outcome.done:
            self._step_count += 1
        truncated = False
        if not outcome.done and self._step_count >= self.max_steps:
            end = self._on_budget_exhausted()
            end.observation = outcome.observation + "\n" + end.observation
            outcome, truncated = end, True
        self._done = outcome.done
        info = self._info()
        info.update(outcome.extra)
        reward = 0.0
        if outcome.done:
            reward = float(outcome.reward)
            name, value = outcome.raw_metric or ("reward", reward)
            info.update(instance_reward=reward, raw_metric={"name": name, "value": float(value)},
                        solved=bool(outcome.solved) if outcome.solved is not None else reward > 0)
        self._last_obs = sanitize(outcome.observation)
        return self._last_obs, reward, bool(outcome.done and not truncated), truncated, info

    def parse_action(self, action: str) -> ToolCall:
        """JSON tool call if the reply is one, else the env's text grammar."""
        if len(action) > MAX_ACTION_CHARS:
            raise ActionError(f"action longer than {MAX_ACTION_CHARS} characters")
        bad = _NOT_UTF8.search(action)
        if bad:  # a lone surrogate cannot be encoded for a shell, a file or a database
            raise ActionError(f"the action contains \\u{ord(bad.group()):04x}, a lone surrogate that is not "
                              "valid Unicode text")
        stripped = action.strip()
        if stripped.startswith("{") or stripped.startswith("```"):
            call = as_tool_call(extract_json(stripped))
            if call is not None:
                return validate_call(call, self.tools)
        return self._parse_text(action)

    # ------------------------------------------------------------------ copying
    # A copy is exact or refused with a TypeError: an env holding live resources (sandboxes,
    # database connections) must never end up sharing them with a copy that later closes them.
    def __deepcopy__(self, memo):
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        try:
            state = copy.deepcopy(self.__dict__, memo)
        except Exception as exc:  # noqa: BLE001 - any member that refuses makes the env uncopyable
            raise self._uncopyable("copied", exc) from None
        new.__dict__.update(state)
        return new

    def __getstate__(self):
        state = self.__dict__.copy()
        if id(self) not in _PICKLING:  # check the members once, so a failure names the env
            _PICKLING.add(id(self))
            try:
                pickle.dumps(state)
            except Exception as exc:  # noqa: BLE001
                raise self._uncopyable("pickled", exc) from None
            finally:
                _PICKLING.discard(id(self))
        return state

    def _uncopyable(self, verb: str, exc: BaseException) -> TypeError:
        return TypeError(
            f"{self.env_id or type(self).__name__} cannot be {verb}: it holds live resources or state that "
            f"cannot be copied ({type(exc).__name__}: {str(exc)[:200]}); make a new env with gym.make(...) and "
            "jump to an instance with reset(seed=..., options={'instance': ...}) instead")

    def render(self):
        if self.render_mode == "ansi":
            return self._last_obs
        return None

    # ------------------------------------------------------------------ helpers
    def _find(self, key) -> int:
        if isinstance(key, bool):
            raise ValueError("instance must be an instance id or a position")
        if isinstance(key, int):
            if not 0 <= key < len(self._order):
                raise ValueError(f"instance position {key} out of range 0..{len(self._order) - 1}")
            return key
        for slot in self._order:
            if slot.instance_id == key:
                return slot.position
        raise ValueError(f"unknown instance id {key!r} in schedule {self.schedule.name!r}")

    def _info(self) -> dict[str, Any]:
        slot = self._slot
        inst = slot.instance  # its fields, not Slot's properties: this runs at every step
        left = self.max_steps - self._step_count  # max(0, left) without a call to max (it parses keywords)
        return {
            "instance_id": inst.instance_id,
            "position": slot.position,
            "variant": inst.variant,
            "variant_position": slot.variant_position,
            "step": self._step_count,
            "steps_left": left if left > 0 else 0,
        }
