"""The training adapters, each exercised by its framework's own rollout code against the local
OpenAI-protocol test server (no network), with rewards equal to clbench's runner on the same actions.

clbench's runner (`clbench.runner.play_instance`) plays the scripted reference agent on two
instances of each of two tasks (SpectrumMonitor, Poker; the train split, as training would) and
records its actions. The test server then replays exactly those actions to the framework's
rollout (`ReplayPolicy`: the conversation's first user message names the instance, the number of
assistant turns so far the step), and the framework's rewards must equal the runner's.

verifiers streams every model call, so the server here also answers `stream: true` requests with
server-sent events (`StreamingServer`, a subclass of tests/openai_server.py's ScriptedServer).
The framework tests skip with the reason when the framework is not installed
(`pip install clbench[verifiers]` / `clbench[skyrl]`).
"""
from __future__ import annotations

import json
import os

import pytest

from clbench.agent import make_agent
from clbench.runner import make_env, play_instance
from tests.openai_server import ScriptedServer

#: two tasks x two instances (positions in rollout 0's order of the train split)
CASES = {"clbench/SpectrumMonitor-v6": [0, 5], "clbench/Poker-v9": [2, 4]}
SPLIT = "train"
MODEL = "scripted"


# ------------------------------------------------------------------ clbench's runner, the reference
@pytest.fixture(scope="module")
def runner_results() -> dict[str, dict]:
    """{env_id: {instance_id: {"reward", "actions", "observation"}}} from clbench's runner."""
    out: dict[str, dict] = {}
    for env_id, positions in CASES.items():
        env = make_env(env_id, split=SPLIT)
        out[env_id] = {}
        for pos in positions:
            obs, info = env.reset(seed=0, options={"instance": pos, "stateless": True})
            agent = make_agent("reference", env, seed=0)
            traj: list[dict] = []
            result = play_instance(env, agent, obs, info, traj)
            assert result["error"] is None
            actions = [t["action"] for t in traj if t["event"] == "step"]
            out[env_id][info["instance_id"]] = {"reward": result["reward"], "actions": actions, "observation": obs}
        env.close()
    # the cases are worth comparing: several steps in a poker hand, rewards that differ
    assert all(len(r["actions"]) > 1 for r in out["clbench/Poker-v9"].values())
    return out


#: a whole stateful schedule as one rollout: SpectrumMonitor's 8-scan "short" schedule
STATEFUL = ("clbench/SpectrumMonitor-v6", "short")


@pytest.fixture(scope="module")
def stateful_results() -> dict:
    """One stateful rollout (seed 0) of the reference through clbench's runner code: one agent,
    every instance played with `play_instance`, `reset()` to the next."""
    env_id, schedule = STATEFUL
    env = make_env(env_id, split=SPLIT, schedule=schedule)
    agent = make_agent("reference", env, seed=0)
    obs, info = env.reset(seed=0)
    first, rewards, actions = obs, {}, []
    for pos in range(len(env.unwrapped.schedule)):
        if pos:
            obs, info = env.reset()
        traj: list[dict] = []
        result = play_instance(env, agent, obs, info, traj)
        assert result["error"] is None
        rewards[info["instance_id"]] = result["reward"]
        actions += [t["action"] for t in traj if t["event"] == "step"]
    env.close()
    return {"observation": first, "actions": actions, "rewards": rewards}


# ------------------------------------------------------------------ the test server
class ReplayPolicy:
    """Replays recorded actions: the conversation's first user message is an instance's first
    observation; the number of assistant messages so far is the step."""

    def __init__(self, results: dict[str, dict], stateful: dict):
        self.by_obs = {r["observation"].strip(): r["actions"] for per_env in results.values() for r in per_env.values()}
        self.by_obs[stateful["observation"].strip()] = stateful["actions"]
        self.misses: list[str] = []

    def __call__(self, body: dict) -> dict:
        msgs = body["messages"]
        first = next(_text(m) for m in msgs if m["role"] == "user").strip()
        step = sum(1 for m in msgs if m["role"] == "assistant")
        actions = self.by_obs.get(first)
        if actions is None or step >= len(actions):
            self.misses.append(first[:80])
            return {"content": "(no recorded action)"}
        return {"content": actions[step]}


def _text(message: dict) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content


class StreamingServer(ScriptedServer):
    """ScriptedServer that also answers `stream: true` chat requests as server-sent events."""

    def _handler(self):
        base = super()._handler()
        server = self

        class Handler(base):
            def do_POST(self):
                if not self.path.endswith("/chat/completions"):
                    return super().do_POST()
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if not body.get("stream"):
                    return self._send(*server.chat(body))
                status, headers, payload = server.chat(body)
                if status != 200 or payload is None:
                    return self._send(status, headers, payload)
                self._stream(payload, bool((body.get("stream_options") or {}).get("include_usage")))

            def _stream(self, resp: dict, usage: bool):
                choice = resp["choices"][0]
                msg = choice["message"]
                delta = {"role": "assistant", "content": msg.get("content") or ""}
                if msg.get("tool_calls"):
                    delta["tool_calls"] = [{"index": i, **tc} for i, tc in enumerate(msg["tool_calls"])]
                base_chunk = {"id": resp["id"], "object": "chat.completion.chunk", "created": resp["created"],
                              "model": resp["model"]}
                end = {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}
                chunks = [{**base_chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                          {**base_chunk, "choices": [end]}]
                if usage and "usage" in resp:
                    chunks.append({**base_chunk, "choices": [], "usage": resp["usage"]})
                data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler


@pytest.fixture
def server(runner_results, stateful_results, monkeypatch):
    monkeypatch.setenv("CLBENCH_TEST_KEY", "test-key")
    policy = ReplayPolicy(runner_results, stateful_results)
    with StreamingServer(policy) as srv:
        srv.replay = policy
        yield srv


@pytest.fixture
def need_verifiers():
    """First argument of the verifiers tests: they skip before any fixture does work."""
    pytest.importorskip("verifiers.v1", reason="verifiers is not installed (pip install clbench[verifiers])")


@pytest.fixture
def need_skyrl():
    pytest.importorskip("skyrl_gym", reason="skyrl-gym is not installed (pip install clbench[skyrl])")


def _expected(runner_results) -> dict[str, float]:
    return {iid: r["reward"] for per_env in runner_results.values() for iid, r in per_env.items()}


# ------------------------------------------------------------------ verifiers
def test_verifiers_rollouts_match_runner(need_verifiers, runner_results, server):
    from clbench.adapters.verifiers_env import episode_rewards, load_environment, run_rollouts

    got: dict[str, float] = {}
    for env_id, per_env in runner_results.items():
        env = load_environment(env_id, split=SPLIT, instances=list(per_env))
        episodes = run_rollouts(env, server.base_url, MODEL, api_key_var="CLBENCH_TEST_KEY")
        assert all(ep.ok for ep in episodes), [ep.errors for ep in episodes]
        for ep in episodes:
            (trace,) = ep.traces
            summary = trace.info["clbench"]
            assert summary["completed"] and summary["steps"] == len(per_env[summary["spec"]["instance_id"]]["actions"])
        got.update(episode_rewards(episodes))
    print("verifiers rewards:", got, "runner rewards:", _expected(runner_results))
    assert not server.replay.misses
    assert got == pytest.approx(_expected(runner_results), abs=1e-12)
    assert set(got) == set(_expected(runner_results)) and len(got) == 4


def test_verifiers_stateful_schedule_matches_runner(need_verifiers, stateful_results, server):
    """A whole stateful schedule as one verifiers rollout: the conversation carries every earlier
    instance (and its feedback); the rollout reward is the mean instance reward."""
    from clbench.adapters.verifiers_env import load_environment, run_rollouts

    env_id, schedule = STATEFUL
    env = load_environment(env_id, split=SPLIT, schedule=schedule, unit="schedule")
    (episode,) = run_rollouts(env, server.base_url, MODEL, api_key_var="CLBENCH_TEST_KEY")
    assert episode.ok, episode.errors
    (trace,) = episode.traces
    summary = trace.info["clbench"]
    expected = stateful_results["rewards"]
    print("verifiers stateful:", summary["instance_rewards"], "runner:", expected)
    assert not server.replay.misses
    assert summary["instance_rewards"] == pytest.approx(expected, abs=1e-12)
    assert trace.reward == pytest.approx(sum(expected.values()) / len(expected), abs=1e-12)


def test_verifiers_cli_eval_matches_runner(need_verifiers, runner_results, server, tmp_path):
    """verifiers' own CLI (`vf-eval clbench-verifiers ...`; the plugin module `clbench_verifiers`
    is installed with clbench, no PYTHONPATH needed) rolls out the same instances; its traces carry
    the runner's rewards."""
    import subprocess
    import sys

    got: dict[str, float] = {}
    for env_id, per_env in runner_results.items():
        out = tmp_path / env_id.split("/")[-1]
        cmd = [sys.executable, "-c", "from verifiers.v1.cli.eval.main import main; main()", "clbench-verifiers",
               "-m", MODEL, "--client.base-url", server.base_url, "--client.api-key-var", "CLBENCH_TEST_KEY",
               "--no-push", "--rich", "None", "-o", str(out), "--env.taskset.env-id", env_id,
               "--env.taskset.split", SPLIT, "--env.taskset.instances", json.dumps(list(per_env))]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (traces,) = out.rglob("traces.jsonl")
        for line in traces.read_text().splitlines():
            episode = json.loads(line)
            assert episode["ok"], episode["errors"]
            (trace,) = episode["traces"]
            got[episode["task"]["data"]["info"]["instance_id"]] = trace["rewards"]["instance_reward"]["score"]
    print("vf-eval rewards:", got)
    assert not server.replay.misses
    assert got == pytest.approx(_expected(runner_results), abs=1e-12)


# ------------------------------------------------------------------ skyrl-gym
def test_skyrl_rollouts_match_runner(need_skyrl, runner_results, server):
    import skyrl_gym
    from openai import OpenAI

    from clbench.adapters.skyrl import dataset_rows, register, text_agent_loop

    register()
    client = OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
    got: dict[str, float] = {}
    for env_id, per_env in runner_results.items():
        for row in dataset_rows(env_id, split=SPLIT, instances=list(per_env)):
            env = skyrl_gym.make(row["env_class"], env_config=row["env_config"], extras=row)
            result = text_agent_loop(env, row["prompt"], client, MODEL)
            iid = row["instance_id"]
            assert result["done"] and result["turns"] == len(per_env[iid]["actions"])
            got[iid] = result["reward"]
    print("skyrl rewards:", got, "runner rewards:", _expected(runner_results))
    assert not server.replay.misses
    assert got == pytest.approx(_expected(runner_results), abs=1e-12)
    assert len(got) == 4


def test_skyrl_stateful_schedule_matches_runner(need_skyrl, stateful_results, server):
    import skyrl_gym
    from openai import OpenAI

    from clbench.adapters.skyrl import dataset_rows, register, text_agent_loop

    register()
    client = OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
    env_id, schedule = STATEFUL
    (row,) = dataset_rows(env_id, split=SPLIT, schedule=schedule, unit="schedule")
    env = skyrl_gym.make(row["env_class"], env_config=row["env_config"], extras=row)
    result = text_agent_loop(env, row["prompt"], client, MODEL)
    expected = stateful_results["rewards"]
    got = env.session.instance_rewards
    print("skyrl stateful:", got, "runner:", expected)
    assert not server.replay.misses and result["done"]
    assert got == pytest.approx(expected, abs=1e-12)
    assert result["reward"] == pytest.approx(sum(expected.values()) / len(expected), abs=1e-12)


def test_adapters_do_not_load_with_clbench():
    """`import clbench` imports no framework (the adapters are optional extras)."""
    import subprocess
    import sys

    code = ("import sys, clbench, clbench.adapters, clbench.adapters.core; "
            "print(any(m.split('.')[0] in ('verifiers', 'skyrl_gym') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_verifiers_taskset_is_the_train_split_by_default(need_verifiers):
    from clbench.adapters.verifiers_env import PLUGIN_ID, load_environment

    env = load_environment("clbench/Poker-v9", schedule="short")
    tasks = list(env.taskset)
    assert env.config.taskset.id == PLUGIN_ID and len(tasks) == 12
    assert all(t.data.info["instance_id"].startswith("train-") and t.data.prompt is None for t in tasks)
    assert "heads-up no-limit" in tasks[0].data.system_prompt
    (schedule_task,) = list(load_environment("clbench/Poker-v9", schedule="short", unit="schedule").taskset)
    assert schedule_task.data.info["unit"] == "schedule" and schedule_task.data.info["instance_id"] is None


def test_skyrl_turn_cap_ends_the_instance_with_zero(need_skyrl):
    """SkyRL's `max_turns` (passed in extras) caps a rollout; an unfinished instance scores 0."""
    import skyrl_gym

    from clbench.adapters.skyrl import dataset_rows, register

    register()
    (row,) = dataset_rows("clbench/Poker-v9", instances=[8])
    env = skyrl_gym.make("clbench", env_config={}, extras={**row, "max_turns": 1})
    chat, meta = env.init(row["prompt"])
    assert [m["role"] for m in chat] == ["system", "user"] and meta["instance_id"] == "train-1-Oda-h09"
    out = env.step("CALL")
    assert out["done"] and out["reward"] == 0.0 and out["observations"] == []
    assert out["metadata"]["clbench"]["instance_rewards"] == {"train-1-Oda-h09": 0.0}
    env.close()


def test_skyrl_dataset_rows_written_to_parquet(need_skyrl, tmp_path):
    """`pip install clbench[skyrl]` brings what SkyRL's trainer needs: registration and the parquet dataset."""
    import pandas as pd
    import skyrl_gym

    from clbench.adapters.skyrl import dataset_rows, register, write_parquet

    register()
    assert "clbench" in skyrl_gym.registry
    rows = dataset_rows("clbench/SpectrumMonitor-v6", schedule="short")
    back = pd.read_parquet(write_parquet(rows, str(tmp_path / "train.parquet")))
    assert len(back) == len(rows) == 8 and list(back["instance_id"]) == [r["instance_id"] for r in rows]
    assert set(back["env_class"]) == {"clbench"} and back["prompt"][0][0]["role"] == "system"
    row = back.iloc[3].to_dict()  # a row read back from parquet still makes its env
    env = skyrl_gym.make("clbench", env_config=row["env_config"], extras=row)
    chat, meta = env.init(list(row["prompt"]))
    assert meta["instance_id"] == rows[3]["instance_id"] and chat[-1]["role"] == "user"
    env.close()
