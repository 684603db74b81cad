"""`clbench rollout`: evaluate one agent on one env, stateful and stateless."""
from __future__ import annotations

import json

from clbench.runner import RunConfig, default_workers


def _kv(text: str) -> dict:
    """KEY=VALUE options; values parsed as JSON when they are JSON (numbers, booleans, ...)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"expected KEY=VALUE, got {text!r}")
    try:
        return {key: json.loads(value)}
    except json.JSONDecodeError:
        return {key: value}


#: command-line options passed to the agent as keyword arguments when given
LLM_OPTIONS = ("memory", "model", "base_url", "api_key_env", "temperature", "max_tokens", "cache_dir",
               "context_tokens", "max_retry_wait")


def add_run_arguments(p) -> None:
    p.add_argument("--agent", help="agent name (see `clbench list`)")
    p.add_argument("--system", default="", help="name of the system in results (default: the agent's name for "
                   "its configuration, e.g. llm-MEMORY-MODEL for the LLM agent)")
    p.add_argument("--rollouts", type=int, default=5, help="stateful rollouts (default 5)")
    p.add_argument("--mode", choices=["both", "stateful", "stateless"], default="both")
    p.add_argument("--seed", type=int, default=0, help="rollout k uses seed SEED+k; seed 0 is the canonical order")
    p.add_argument("--workers", type=int, default=default_workers(), help="parallel worker processes")
    p.add_argument("--stateless-passes", type=int, default=0, metavar="N",
                   help="stateless passes (default: one per rollout seed, one for a deterministic agent)")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env keyword argument")
    add_world_arguments(p)
    p.add_argument("--agent-arg", action="append", default=[], metavar="KEY=VALUE", help="agent keyword argument")
    p.add_argument("--resume", metavar="DIR", help="continue the interrupted run in DIR (its config.json decides)")
    p.add_argument("--executor", choices=["local", "ray"], default="local", help="local process pool or Ray")
    p.add_argument("--ray-address", help="Ray cluster address (default: start a local Ray instance)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--shock", action="append", default=[], metavar="EVENT@K",
                   help="lifecycle shock before instance position K: flush@K, recompact@K, partial-reset[:F]@K")
    from clbench.error_policy import (DEFAULT_FAIL_ON_ERROR, DEFAULT_FAIL_ON_FAULT, DEFAULT_MAX_CONSECUTIVE,
                                      DEFAULT_MAX_CONSECUTIVE_FAULTS)

    p.add_argument("--fail-on-error", default=str(DEFAULT_FAIL_ON_ERROR), metavar="N|F",
                   help="stop the run once more than N instances (N >= 1) or this fraction F of the planned "
                        "instances (0 <= F < 1; 0 = the first) failed on model-call errors (default "
                        f"{DEFAULT_FAIL_ON_ERROR}); any errored instance makes the run incomplete (exit 3)")
    p.add_argument("--max-consecutive-errors", type=int, default=DEFAULT_MAX_CONSECUTIVE, metavar="K",
                   help=f"stop the run after K errored instances in a row (default {DEFAULT_MAX_CONSECUTIVE})")
    p.add_argument("--fail-on-fault", default=str(DEFAULT_FAIL_ON_FAULT), metavar="N|F|off",
                   help="stop the run once more than N instances (N >= 1) or this fraction F of the planned "
                        "instances were scored on faulty model replies (a refusal, a reply cut off at max_tokens "
                        f"or filtered, ...; default {DEFAULT_FAIL_ON_FAULT}; off: never); such a run exits 4")
    p.add_argument("--max-consecutive-faults", type=int, default=DEFAULT_MAX_CONSECUTIVE_FAULTS, metavar="K",
                   help="stop the run after K instances in a row scored on faulty model replies "
                        f"(default {DEFAULT_MAX_CONSECUTIVE_FAULTS})")
    llm = p.add_argument_group("LLM agent (--agent llm)")
    llm.add_argument("--memory", help="memory system (see `clbench agents`)")
    llm.add_argument("--model", help="model name at the endpoint")
    llm.add_argument("--base-url", help="OpenAI-compatible base URL, e.g. http://localhost:8000/v1")
    llm.add_argument("--api-key-env", help="environment variable holding the API key (default OPENAI_API_KEY)")
    llm.add_argument("--temperature", type=float)
    llm.add_argument("--max-tokens", type=int)
    llm.add_argument("--cache-dir", help="on-disk response cache keyed by the full request")
    llm.add_argument("--context-tokens", type=int,
                     help="prompt budget in tokens (default 32768): system prompt, carried history, the instance "
                          "and max_tokens stay within it; the oldest history is dropped first. Counted with the "
                          "model's tokenizer when known (OpenAI models), else estimated at 4 characters a token; "
                          "the run card says which")
    llm.add_argument("--max-retry-wait", type=float,
                     help="longest Retry-After (seconds) a rate-limited call waits (default 300); a server asking "
                          "for more fails the call with that message")


def add_world_arguments(p, calibrate: bool = True) -> None:
    """--world-seed (and --no-calibrate): which world to play, and whether to calibrate it first."""
    p.add_argument("--world-seed", type=int, default=None, metavar="N",
                   help="play a freshly drawn world N of the same kind and difficulty (default: the canonical world)")
    if calibrate:
        p.add_argument("--no-calibrate", action="store_true",
                       help="do not compute r_max / r_reference of an uncalibrated world or schedule first: "
                            "normalized metrics are then undefined, with the reason")


def env_kwargs_from_args(args) -> dict:
    """--env-arg KEY=VALUE items and --world-seed as env keyword arguments."""
    env_kwargs: dict = {}
    for item in getattr(args, "env_arg", None) or []:
        env_kwargs.update(_kv(item))
    if getattr(args, "world_seed", None) is not None:
        env_kwargs["world_seed"] = args.world_seed
    return env_kwargs


def config_from_args(args, env_id: str, out: str) -> RunConfig:
    env_kwargs, agent_kwargs = env_kwargs_from_args(args), {}
    for item in args.agent_arg:
        agent_kwargs.update(_kv(item))
    for name in LLM_OPTIONS:
        value = getattr(args, name, None)
        if value is not None:
            agent_kwargs[name] = value
    return RunConfig(env_id=env_id, agent=args.agent, out=out, system=args.system, rollouts=args.rollouts,
                     mode=args.mode, seed=args.seed, workers=args.workers, env_kwargs=env_kwargs,
                     agent_kwargs=agent_kwargs, shocks=list(args.shock),
                     stateless_passes=args.stateless_passes, calibrate=not getattr(args, "no_calibrate", False))


def preflight(cfgs: list[RunConfig], probe: bool = False) -> None:
    """Everything checkable before a job starts or --out is created: the run directory, each env
    and its --env-arg, each agent and its options, shocks; errors are one-line ValueErrors."""
    from clbench.agent import Agent, make_agent
    from clbench.run_dir import check_out_dir
    from clbench.runner import cached_env
    from clbench.shocks import parse_shock

    check_out_dir(cfgs[0].out, [(cfg.env_id, cfg.system) for cfg in cfgs])
    checked: set = set()
    for cfg in cfgs:
        for shock in cfg.shocks:
            parse_shock(shock)
        try:
            env = cached_env(cfg.env_id, cfg.env_kwargs)  # cached: the run reuses this env
        except TypeError as exc:  # an --env-arg the env does not take
            raise ValueError(f"--env-arg for {cfg.env_id}: {exc}") from None
        if probe and not env.unwrapped.knows_facts():
            raise ValueError(f"{cfg.env_id} cannot be used by the probe ladder: it does not expose "
                             "instance_facts() (use e.g. clbench/MemoryProbe or clbench/DBExplore)")
        try:
            agent = make_agent(cfg.agent, env, seed=cfg.seed, **cfg.agent_kwargs)
        except TypeError as exc:  # an --agent-arg the agent does not take
            raise ValueError(f"--agent {cfg.agent}: {exc}") from None
        if probe and type(agent).probe is Agent.probe:
            raise ValueError(f"agent {cfg.agent!r} does not support the probe ladder (it has no memory to probe)")
        check_endpoint(cfg, agent, checked)


def policy_from_args(args):
    """The error policy of --fail-on-error, --max-consecutive-errors, --fail-on-fault and --max-consecutive-faults."""
    from clbench import error_policy as ep

    return ep.ErrorPolicy(getattr(args, "fail_on_error", None) or ep.DEFAULT_FAIL_ON_ERROR,
                          getattr(args, "max_consecutive_errors", ep.DEFAULT_MAX_CONSECUTIVE),
                          getattr(args, "fail_on_fault", None) or ep.DEFAULT_FAIL_ON_FAULT,
                          getattr(args, "max_consecutive_faults", ep.DEFAULT_MAX_CONSECUTIVE_FAULTS))


def run_and_report(args, cfgs) -> int:
    """Run (or resume) and print the metrics table."""
    import sys

    from clbench.error_policy import EXIT_FAULTED, EXIT_INCOMPLETE
    from clbench.rollout import RunIncomplete, configs_from_dir, resume_run, run_many
    from clbench.runcard import compute
    from clbench.reporting.tables import print_metrics

    policy = policy_from_args(args)
    opts = {"executor": args.executor, "ray_address": args.ray_address, "quiet": args.quiet, "policy": policy}
    incomplete = None
    try:
        if args.resume:
            out = args.resume
            cfgs = configs_from_dir(out)[0]
            preflight_resumed(cfgs)
            resume_run(out, **{k: v for k, v in opts.items() if k != "executor" or v != "local"})
        else:
            preflight(cfgs)
            out = cfgs[0].out
            run_many(cfgs, **opts)
    except RunIncomplete as exc:
        incomplete = exc
    if any(c.mode == "both" for c in cfgs) and (incomplete is None or incomplete.card):
        print_metrics(compute(out))
    elif incomplete is None:
        print(f"records written to {out}/results.jsonl")
    if incomplete is not None:
        print(str(incomplete), file=sys.stderr)
        if incomplete.faulty:
            print(f"exit {EXIT_FAULTED}: the run was stopped for its model faults", file=sys.stderr)
            return EXIT_FAULTED
        print(f"exit {EXIT_INCOMPLETE}: the run is incomplete", file=sys.stderr)
        return EXIT_INCOMPLETE
    return 0


def check_endpoint(cfg: RunConfig, agent, checked: set) -> None:
    """The agent's pre-flight call (the LLM agent: one cheap call to its endpoint), once per
    endpoint, model and key; a failure is a one-line ValueError that names the fix."""
    check = getattr(agent, "preflight", None)
    key = (cfg.agent_kwargs.get("base_url"), cfg.agent_kwargs.get("model"), cfg.agent_kwargs.get("api_key_env"))
    if not callable(check) or key in checked:
        return
    checked.add(key)
    try:
        check()
    except Exception as exc:  # LLMCallError
        raise ValueError(str(exc)) from None


def preflight_resumed(cfgs: list[RunConfig]) -> None:
    """Before a resumed run plays anything: the agents' endpoints answer (the pre-flight call)."""
    from clbench.agent import make_agent
    from clbench.runner import cached_env

    checked: set = set()
    for cfg in cfgs:
        check_endpoint(cfg, make_agent(cfg.agent, cached_env(cfg.env_id, cfg.env_kwargs), seed=cfg.seed,
                                       **cfg.agent_kwargs), checked)


def warn_uneven_deals(env_id: str, rollouts: int) -> None:
    """One line on stderr when the rollouts do not play each of the env's deals equally often: r_max and
    r_reference are means over all of them, the run's rewards are not (normalized rewards then mix the
    luck of the deals played with the skill)."""
    import sys

    from clbench.registry import env_class

    try:
        deals = env_class(env_id).deals
    except Exception:  # noqa: BLE001 - an unknown env is reported by the run's own checks
        return
    if deals > 1 and rollouts % deals:
        print(f"warning: {env_id} deals rollout seed s its deal s % {deals}; {rollouts} rollouts play its deals "
              f"unevenly while r_max and r_reference average all {deals}: use a multiple of {deals} rollouts",
              file=sys.stderr)


#: settings a resumed run takes from its own metadata: given with --resume they would be ignored
FIXED_ON_RESUME = ("env", "agent", "memory", "model", "base_url", "api_key_env", "temperature", "max_tokens",
                   "context_tokens", "world_seed")


def cmd_rollout(args) -> int:
    if args.resume:
        given = [f"--{name.replace('_', '-')}" for name in FIXED_ON_RESUME if getattr(args, name, None) is not None]
        if given:
            raise ValueError(f"--resume plays the run with its own settings; {', '.join(given)} cannot change them "
                             "(start a new run with --out to use other ones)")
        return run_and_report(args, [])
    if not args.env or not args.agent:
        raise ValueError("--env and --agent are required (or --resume DIR)")
    from clbench.commands.calibrate import warn_uncalibrated

    world = getattr(args, "world_seed", None)
    if world is None:
        warn_uncalibrated(args.env)  # normalized metrics need r_max/r_reference (other worlds calibrate)
    warn_uneven_deals(args.env, args.rollouts)
    out = args.out or f"runs/{args.env.split('/')[-1]}-{args.agent}" + ("" if world is None else f"-world-{world}")
    return run_and_report(args, [config_from_args(args, args.env, out)])


def register(sub) -> None:
    p = sub.add_parser("rollout", help="run an agent stateful and stateless on one env and print the metrics")
    p.add_argument("--env", help="env id, e.g. clbench/SpectrumMonitor-v6")
    p.add_argument("--out", default="", help="run directory (default runs/<env>-<agent>)")
    add_run_arguments(p)
    p.set_defaults(func=cmd_rollout)
