"""Roll out clbench instances with PrimeIntellect verifiers (pip install "clbench[verifiers]").

Every rollout is one verifiers episode run by verifiers' own machinery (`Env.serving()` and
`Env.run_slot`): the model talks through verifiers' chat harness, the clbench env plays the user,
and the trace's reward is clbench's instance reward. The train split is the default: those
instances come from other seeds and never appear in the benchmark.

    python examples/verifiers_rollout.py --base-url http://localhost:8000/v1 --model Qwen/Qwen3-8B \
        --env clbench/Poker-v9 --instances 0 1 2 3
    python examples/verifiers_rollout.py ... --env clbench/SpectrumMonitor-v6 --schedule short --unit schedule

For RL training, point prime-rl (or any verifiers trainer) at the same env:
`clbench.adapters.verifiers_env.load_environment(env_id, split="train", ...)`.
"""
from __future__ import annotations

import argparse
import os

from clbench.adapters.verifiers_env import episode_rewards, load_environment, run_rollouts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True, help="an OpenAI-compatible endpoint, e.g. vLLM's")
    ap.add_argument("--model", required=True)
    ap.add_argument("--api-key-var", default="OPENAI_API_KEY", help="environment variable holding the key")
    ap.add_argument("--env", default="clbench/SpectrumMonitor-v6")
    ap.add_argument("--split", default="train", choices=["train", "test"])
    ap.add_argument("--schedule", default="default")
    ap.add_argument("--unit", default="instance", choices=["instance", "schedule"])
    ap.add_argument("--instances", nargs="*", default=None, help="instance positions or ids (default: all)")
    ap.add_argument("--seeds", nargs="*", type=int, default=[0])
    args = ap.parse_args()
    os.environ.setdefault(args.api_key_var, "EMPTY")  # local servers take any key
    instances = [int(i) if i.isdigit() else i for i in args.instances] if args.instances else None
    env = load_environment(args.env, split=args.split, schedule=args.schedule, seeds=args.seeds, unit=args.unit,
                           instances=instances if args.unit == "instance" else None)
    episodes = run_rollouts(env, args.base_url, args.model, api_key_var=args.api_key_var)
    for name, reward in episode_rewards(episodes).items():
        print(f"{name}\treward {reward:.4f}")
    for ep in episodes:
        for err in ep.errors:
            print("error:", err.type, err.message[:300])


if __name__ == "__main__":
    main()
