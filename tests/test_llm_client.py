"""clbench.llm: the chat client against a real local HTTP server (tests/openai_server.py).

Retries honour Retry-After on 429, back off on 500 and on a reply that hangs past the time
limit, give up with LLMCallError, adapt to endpoints that reject a parameter, limit concurrent
calls, account tokens (cached and reasoning too) and cost from an extensible price table, and
serve repeated requests from the on-disk cache without paying twice.
"""
from __future__ import annotations

import email.utils
import threading
import time

import pytest

from clbench.llm import ChatClient, LLMCallError, PriceTable, ResponseCache, ToolsUnsupported, retry_after
from tests.openai_server import Fault, FixedPolicy, ScriptedServer

MESSAGES = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "ping " * 300}]


@pytest.fixture
def prices(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text("models:\n  scripted: {input: 2.0, cached_input: 0.5, output: 8.0}\n")
    return str(path)


@pytest.fixture
def server():
    with ScriptedServer(FixedPolicy("pong"), reasoning_tokens=5) as srv:
        yield srv


def client(server, **kw) -> ChatClient:
    kw.setdefault("backoff", 0.01)
    return ChatClient(kw.pop("model", "scripted"), base_url=server.base_url, **kw)


# ---------------------------------------------------------------------- prices
def test_price_lookup_prefix_date_and_unknown():
    table = PriceTable.load()
    gpt = table.lookup("gpt-4o")
    assert table.lookup("openai/gpt-4o-2024-08-06") == gpt
    assert table.lookup("GPT-4o-mini") != gpt  # the longer name has its own price
    assert table.cost("gpt-4o", 1_000_000, 0) == pytest.approx(gpt.input)
    assert table.cost("gpt-4o", 1_000_000, 1_000_000, cached=1_000_000) == pytest.approx(gpt.cached_input + gpt.output)
    assert table.cost("no-such-model", 10, 10) is None


def test_user_price_tables_extend_and_override(tmp_path, monkeypatch, prices):
    env_file = tmp_path / "env.yaml"
    env_file.write_text("models:\n  gpt-4o: {input: 1.0, output: 1.0}\n  mine: {input: 3.0, output: 4.0}\n")
    monkeypatch.setenv("CLBENCH_PRICES", str(env_file))
    table = PriceTable.load(prices)
    assert table.cost("gpt-4o", 1_000_000, 0) == pytest.approx(1.0)  # overridden
    assert table.cost("mine", 0, 1_000_000) == pytest.approx(4.0)  # added; cached defaults to input
    assert table.cost("scripted", 1_000_000, 0, cached=500_000) == pytest.approx(1.25)
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  x: {input: 1.0}\n")
    with pytest.raises(ValueError, match="needs 'input' and 'output'"):
        PriceTable.load(str(bad))
    with pytest.raises(FileNotFoundError):
        PriceTable.load(str(tmp_path / "missing.yaml"))


def test_retry_after_forms():
    assert retry_after({"retry-after": "3"}) == 3.0
    assert retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= retry_after({"retry-after": future}) <= 31
    assert retry_after({}) is None


# ---------------------------------------------------------------------- calls
def test_chat_reports_tokens_cached_reasoning_and_cost(server, prices):
    c = client(server, prices=prices)
    first = c.chat(MESSAGES, max_tokens=16)
    second = c.chat(MESSAGES, max_tokens=16)
    assert first.content == "pong" and first.retries == 0 and not first.from_cache
    u = second.usage
    assert u.prompt > 300 and u.completion == 1 + 5 and u.reasoning == 5
    assert first.usage.cached == 0 and u.cached >= 64  # the repeated prompt shares its prefix
    assert u.cost == pytest.approx(((u.prompt - u.cached) * 2.0 + u.cached * 0.5 + u.completion * 8.0) / 1e6)
    assert server.requests[0]["max_tokens"] == 16
    assert client(server, model="unknown-model").chat(MESSAGES).usage.cost is None


def test_429_waits_for_retry_after(server):
    waits = []
    c = client(server, sleep=lambda s: (waits.append(s), time.sleep(s)))
    server.faults.extend([Fault("rate_limit", retry_after="1")])
    start = time.perf_counter()
    reply = c.chat(MESSAGES)
    assert reply.content == "pong" and reply.retries == 1
    assert waits == [1.0] and time.perf_counter() - start >= 1.0
    assert len(server.requests) == 2


def test_500_garbage_and_hang_are_retried_with_backoff(server):
    waits = []
    c = client(server, timeout=0.5, sleep=lambda s: (waits.append(s), time.sleep(s)))
    server.faults.extend([Fault("server_error"), Fault("garbage"), Fault("hang", seconds=2.0)])
    start = time.perf_counter()
    reply = c.chat(MESSAGES)
    assert reply.content == "pong" and reply.retries == 3
    assert time.perf_counter() - start < 1.5  # the hang was cut at the 0.5 s limit
    # exponential backoff with jitter: 0.01 * 2**k * [0.5, 1]
    assert [0.005 * 2 ** k <= w <= 0.01 * 2 ** k for k, w in enumerate(waits)] == [True] * 3
    assert server.fault_log == ["server_error", "garbage", "hang"]


def test_gives_up_after_max_retries_and_on_fatal_status(server):
    c = client(server, max_retries=2)
    server.faults.extend([Fault("server_error")] * 3)
    with pytest.raises(LLMCallError, match="HTTP 500.*gave up after 3 attempts"):
        c.chat(MESSAGES)
    assert len(server.requests) == 3
    server.faults.append(Fault("unauthorized"))
    with pytest.raises(LLMCallError, match=r"HTTP 401.*\$OPENAI_API_KEY") as info:
        c.chat(MESSAGES)
    assert info.value.status == 401 and len(server.requests) == 4  # not retried


def test_adapts_to_rejected_parameters():
    with ScriptedServer(FixedPolicy("ok"), reject_max_tokens=True, supports_tools=False) as srv:
        c = client(srv)
        assert c.chat(MESSAGES, max_tokens=8).content == "ok"
        assert "max_tokens" in srv.requests[0] and srv.requests[1]["max_completion_tokens"] == 8
        tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
        with pytest.raises(ToolsUnsupported):
            c.chat(MESSAGES, tools=[tool])


def test_missing_usage_is_estimated():
    with ScriptedServer(FixedPolicy("x" * 40), report_usage=False) as srv:
        u = client(srv).chat(MESSAGES).usage
    assert u.estimated and u.completion == 10 and u.prompt > 300


def test_response_cache_pays_once(server, prices, tmp_path):
    c = client(server, prices=prices, cache_dir=str(tmp_path / "cache"))
    paid = c.chat(MESSAGES, temperature=0.0)
    hit = client(server, prices=prices, cache_dir=str(tmp_path / "cache")).chat(MESSAGES, temperature=0.0)
    assert len(server.requests) == 1 and hit.from_cache and not paid.from_cache
    assert hit.content == paid.content and hit.usage.prompt == paid.usage.prompt
    assert paid.usage.cost > 0 and hit.usage.cost == 0.0
    client(server, cache_dir=str(tmp_path / "cache"), seed=1).chat(MESSAGES, temperature=0.0)  # other seed: miss
    c.chat(MESSAGES, temperature=0.5)  # other request: miss
    assert len(server.requests) == 3 and len(ResponseCache(tmp_path / "cache")) == 3


def test_concurrency_limit_per_endpoint(server):
    server.delay = 0.2
    clients = [client(server, max_concurrency=2) for _ in range(6)]
    threads = [threading.Thread(target=c.chat, args=(MESSAGES,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(server.requests) == 6 and server.max_inflight == 2


def test_embeddings(server):
    vecs, usage = client(server).embed(["spectrum channel", "spectrum channel", "poker"], "embedder")
    assert len(vecs) == 3 and vecs[0] == vecs[1] != vecs[2] and usage.prompt > 0


def test_needs_a_key_for_hosted_apis(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(ValueError, match=r"\$NO_SUCH_KEY_VAR"):
        ChatClient("gpt-4o", api_key_env="NO_SUCH_KEY_VAR")


# ---------------------------------------------------------------------- issue 30: failures never pass for results
def test_retry_after_is_honoured_up_to_the_cap_and_a_longer_one_fails_saying_so(server):
    waits = []
    c = client(server, sleep=waits.append, max_retry_wait=120)
    server.faults.extend([Fault("rate_limit", retry_after="90")])
    assert c.chat(MESSAGES).content == "pong" and waits == [90.0]  # not cut to max_backoff (60)
    server.faults.extend([Fault("rate_limit", retry_after="3600")])
    with pytest.raises(LLMCallError, match=r"retry after 3600 s, more than max_retry_wait 120 s"):
        c.chat(MESSAGES)
    assert waits == [90.0]  # no silent shorter wait


@pytest.mark.parametrize("kind", ["null", "no_choices", "garbage"])
def test_a_200_reply_without_a_body_is_retried(server, kind):
    server.faults.extend([Fault(kind), Fault(kind)])
    reply = client(server).chat(MESSAGES)
    assert reply.content == "pong" and reply.retries == 2 and len(reply.attempt_errors) == 2
    server.faults.extend([Fault(kind)] * 3)
    with pytest.raises(LLMCallError, match="gave up after 3 attempts") as info:
        client(server, max_retries=2).chat(MESSAGES)
    assert len(info.value.attempt_errors) == 3


def test_preflight_names_the_fix_for_key_model_and_url():
    with ScriptedServer(FixedPolicy("OK"), models=("scripted", "other")) as srv:
        client(srv).check()  # a working endpoint: one call, no error
        assert len(srv.requests) == 1 and srv.requests[0]["max_tokens"] == 16
        srv.faults.extend([Fault("unauthorized")])
        with pytest.raises(LLMCallError, match=r"rejected the API key in \$OPENAI_API_KEY .*--api-key-env") as info:
            client(srv).check()
        assert "\n" not in str(info.value)
        with pytest.raises(LLMCallError, match=r"model 'nope' not found .*check --model \(the endpoint lists: scripted, other\)"):
            client(srv, model="nope").check()
    start = time.monotonic()
    with pytest.raises(LLMCallError, match=r"cannot reach http://127.0.0.1:9/v1 .*check --base-url"):
        ChatClient("scripted", base_url="http://127.0.0.1:9/v1", backoff=0.01).check()
    assert time.monotonic() - start < 10


def test_a_call_is_charged_at_the_price_its_endpoint_is_shown_with():
    """Red team s16: the run card showed Cerebras' price for gpt-oss-120b at Cerebras' URL while calls were
    charged OpenAI's (9x less). A reply's cost now uses the endpoint's price, as the card does."""
    from clbench.llm.client import _reply_from_dict
    from clbench.llm.prices import PriceTable

    table, url = PriceTable.load(), "https://api.cerebras.ai/v1"
    data = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1_000_000, "completion_tokens": 0}}
    shown = table.lookup_with_source("gpt-oss-120b", url)[0]
    assert shown != table.lookup_with_source("gpt-oss-120b")[0]  # the providers price it differently
    reply = _reply_from_dict(data, "gpt-oss-120b", table, [], base_url=url)
    assert reply.usage.cost == pytest.approx(shown.input)


def test_content_parts_are_read_as_their_text_and_a_refusal_is_kept():
    from clbench.llm.client import _reply_from_dict
    from clbench.llm.prices import PriceTable

    parts = {"choices": [{"message": {"content": [{"type": "text", "text": "ANSWER "}, {"type": "text", "text": "42"}]},
                          "finish_reason": "stop"}]}
    assert _reply_from_dict(parts, "m", PriceTable({}), []).content == "ANSWER 42"
    refused = {"choices": [{"message": {"content": None, "refusal": "I can't help with that."}, "finish_reason": "stop"}]}
    reply = _reply_from_dict(refused, "m", PriceTable({}), [])
    assert reply.content == "" and reply.refusal == "I can't help with that."


def test_a_reply_that_trickles_in_is_cut_at_the_timeout():
    """Red team s16: `timeout` bounded each read, so a server sending a byte now and then held one call for 54 s
    under timeout=2. The whole reply must now come within the timeout, else the call is retried and fails."""
    with ScriptedServer(FixedPolicy("pong")) as server:
        server.faults.extend([Fault("drip", seconds=0.3)] * 2)
        client = ChatClient("scripted", base_url=server.base_url, timeout=1.0, max_retries=1, backoff=0.01)
        started = time.monotonic()
        with pytest.raises(LLMCallError, match="no reply within 1 s"):
            client.chat([{"role": "user", "content": "ping"}])
        assert time.monotonic() - started < 5
        assert client.chat([{"role": "user", "content": "ping"}]).content == "pong"  # a normal reply still comes
