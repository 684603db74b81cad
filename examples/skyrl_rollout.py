"""Roll out clbench instances through skyrl-gym (pip install "clbench[skyrl]").

`clbench.adapters.skyrl.register()` registers the env class "clbench" with skyrl-gym;
`dataset_rows(...)` makes SkyRL dataset rows (write them to parquet for SkyRL's trainer, with
`environment.env_class=clbench` and `generator.max_turns` at least the instance's step budget);
`text_agent_loop(...)` is SkyRL's generator loop on the text path, against any OpenAI-compatible
endpoint. The train split is the default: its instances never appear in the benchmark.

    python examples/skyrl_rollout.py --base-url http://localhost:8000/v1 --model Qwen/Qwen3-8B \
        --env clbench/Poker-v9 --instances 0 1 2 3
    python examples/skyrl_rollout.py ... --write-parquet train.parquet   # the dataset for SkyRL
"""
from __future__ import annotations

import argparse

import skyrl_gym
from openai import OpenAI

from clbench.adapters.skyrl import dataset_rows, register, text_agent_loop, write_parquet


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True, help="an OpenAI-compatible endpoint, e.g. vLLM's")
    ap.add_argument("--model", required=True)
    ap.add_argument("--api-key", default="EMPTY")
    ap.add_argument("--env", default="clbench/SpectrumMonitor-v6")
    ap.add_argument("--split", default="train", choices=["train", "test"])
    ap.add_argument("--schedule", default="default")
    ap.add_argument("--unit", default="instance", choices=["instance", "schedule"])
    ap.add_argument("--instances", nargs="*", default=None, help="instance positions or ids (default: all)")
    ap.add_argument("--write-parquet", default=None, help="also write the rows as a SkyRL dataset")
    args = ap.parse_args()
    register()
    instances = [int(i) if i.isdigit() else i for i in args.instances] if args.instances else None
    rows = dataset_rows(args.env, split=args.split, schedule=args.schedule, unit=args.unit,
                        instances=instances if args.unit == "instance" else None)
    if args.write_parquet:
        write_parquet(rows, args.write_parquet)
        print(f"wrote {len(rows)} rows to {args.write_parquet}")
    client = OpenAI(base_url=args.base_url, api_key=args.api_key)
    for row in rows:
        env = skyrl_gym.make(row["env_class"], env_config=row["env_config"], extras=row)
        result = text_agent_loop(env, row["prompt"], client, args.model)
        name = row["instance_id"] or f"{args.env} {args.schedule}"
        print(f"{name}\treward {result['reward']:.4f}\tturns {result['turns']}\tdone {result['done']}")


if __name__ == "__main__":
    main()
