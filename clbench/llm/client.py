"""A chat-completions client over the official `openai` SDK, for any OpenAI-compatible endpoint.

What it adds to the SDK: retries (tenacity) with exponential backoff that honour `Retry-After`
(and `retry-after-ms`) on 429, 5xx, timeouts, dropped connections and 200 replies without a
body or choices; a server asking to wait longer than `max_retry_wait` seconds (default 300,
`--agent-arg max_retry_wait=S`) fails the call and says so instead of being cut short
silently; a per-call time limit on the whole reply (wall clock, not per read); a per-process limit on concurrent calls to one endpoint; token
accounting per call (prompt, completion, cached, reasoning) with cost from a `PriceTable`; an
optional on-disk response cache; adaptation to endpoints that reject a parameter (`max_tokens`
-> `max_completion_tokens`, no `temperature`); and `check()`, the one cheap pre-flight call that
tells a wrong key, model or URL apart before a run starts. A call that still fails raises
`LLMCallError`.
"""
from __future__ import annotations

import email.utils
import json
import math
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import openai
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

from clbench.llm.cache import ResponseCache, request_key
from clbench.llm.prices import PriceTable

#: HTTP statuses worth another try (besides timeouts and dropped connections)
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})

# per process: one limit on calls in flight per endpoint, one SDK (HTTP connection pool) per endpoint
_SLOTS: dict[tuple[str, int], threading.BoundedSemaphore] = {}
_SDKS: dict[tuple[str, str, float], openai.OpenAI] = {}
_SHARED_LOCK = threading.Lock()


def estimate_tokens(text: str) -> int:
    """Rough token count (4 characters a token) for budgets and endpoints that report no usage."""
    return math.ceil(len(text) / 4)


def messages_tokens(messages: list[dict]) -> int:
    """Estimated prompt tokens of chat messages (content, tool-call arguments, per-message overhead)."""
    total = 0
    for m in messages:
        total += 4 + estimate_tokens(m.get("content") or "")
        for call in m.get("tool_calls") or []:
            total += estimate_tokens(call["function"]["name"] + call["function"]["arguments"])
    return total


class LLMCallError(RuntimeError):
    """A model call that failed for good (after retries, or with an error retrying cannot fix)."""

    #: the runner records an instance lost to this as an infrastructure error (not the agent's score)
    infrastructure = True

    def __init__(self, message: str, status: int | None = None, attempts: int = 1,
                 attempt_errors: list[str] | None = None):
        super().__init__(message)
        self.status = status
        self.attempts = attempts
        self.attempt_errors = list(attempt_errors or [])


class _Retryable(Exception):
    """One failed attempt worth another: `wait` is the server's Retry-After, if it sent one."""

    def __init__(self, message: str, wait: float | None = None):
        super().__init__(message)
        self.wait = wait


class ToolsUnsupported(LLMCallError):
    """The endpoint rejected the `tools` parameter: use the env's text grammar instead."""


class ContextTooLong(LLMCallError):
    """The prompt and max_tokens exceed the model's context: the agent's own transcript grew past what the
    model takes. The instance is the agent's loss (an agent error), not the infrastructure's: replaying it
    at temperature 0 would overflow again."""

    infrastructure = False


#: what endpoints say when a prompt exceeds the model's context (OpenAI, vLLM, llama.cpp, Ollama, ...)
CONTEXT_WORDS = ("context length", "context_length", "context window", "maximum context", "too many tokens",
                 "prompt is too long")


@dataclass
class CallUsage:
    prompt: int = 0
    completion: int = 0
    cached: int = 0
    reasoning: int = 0
    cost: float | None = None
    #: True when the endpoint reported no usage and the counts are estimates
    estimated: bool = False


@dataclass
class ToolCallReply:
    id: str
    name: str
    arguments: str  # raw JSON text as the model wrote it (may be malformed)


@dataclass
class ChatReply:
    content: str
    tool_calls: list[ToolCallReply] = field(default_factory=list)
    finish_reason: str | None = None
    usage: CallUsage = field(default_factory=CallUsage)
    from_cache: bool = False
    #: retries this call needed (0 when the first attempt succeeded) and why each attempt failed
    retries: int = 0
    attempt_errors: list[str] = field(default_factory=list)
    #: reasoning text when the endpoint returns it (`reasoning_content` / `reasoning`)
    reasoning: str = ""
    #: seconds from the first attempt to the reply (retries and their waits included)
    latency: float = 0.0
    #: the endpoint's refusal message (`message.refusal`), when it refused instead of replying
    refusal: str = ""


def retry_after(headers) -> float | None:
    """Seconds to wait from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        when = email.utils.parsedate_to_datetime(value) if email.utils.parsedate_tz(value) else None
        return None if when is None else max(0.0, when.timestamp() - time.time())


def _reply_from_dict(data: dict, model: str, prices: PriceTable, messages: list[dict],
                     base_url: str | None = None) -> ChatReply:
    choices = data.get("choices") or []
    msg = (choices[0].get("message") or {}) if choices else {}
    calls = []
    for i, tc in enumerate(msg.get("tool_calls") or []):
        fn = tc.get("function") or {}
        args = fn.get("arguments")
        calls.append(ToolCallReply(tc.get("id") or f"call_{i}", str(fn.get("name") or ""),
                                   args if isinstance(args, str) else json.dumps(args or {})))
    content = _text(msg.get("content"))
    raw = data.get("usage") or {}
    if raw.get("prompt_tokens") is None:
        usage = CallUsage(prompt=messages_tokens(messages),
                          completion=estimate_tokens(content + "".join(c.arguments for c in calls)), estimated=True)
    else:
        usage = CallUsage(prompt=int(raw.get("prompt_tokens") or 0), completion=int(raw.get("completion_tokens") or 0),
                          cached=int((raw.get("prompt_tokens_details") or {}).get("cached_tokens") or 0),
                          reasoning=int((raw.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0))
    usage.cost = prices.cost(model, usage.prompt, usage.completion, usage.cached, base_url=base_url)
    reasoning = msg.get("reasoning_content") or msg.get("reasoning") or ""
    return ChatReply(content, calls, choices[0].get("finish_reason") if choices else None, usage,
                     reasoning=reasoning if isinstance(reasoning, str) else json.dumps(reasoning),
                     refusal=_text(msg.get("refusal")))


def _text(content) -> str:
    """A message's text: a string as it is, a list of content parts (as some endpoints send) as their texts
    joined (a part without text as its JSON, so nothing the model sent is dropped), nothing as ""."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p if isinstance(p, str) else str(p["text"]) if isinstance(p, dict) and p.get("text") is not None
                       else json.dumps(p) for p in content)
    return json.dumps(content)


class ChatClient:
    """Chat completions (and embeddings) against one model at one OpenAI-compatible endpoint."""

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 120.0, max_retries: int = 5, backoff: float = 1.0, max_backoff: float = 60.0,
                 max_concurrency: int = 4, cache_dir: str | None = None, prices: PriceTable | str | dict | None = None,
                 seed: int = 0, sleep: Callable[[float], None] = time.sleep, max_retry_wait: float = 300.0):
        if not model:
            raise ValueError("a model name is required (--model)")
        if timeout <= 0 or max_retries < 0 or max_concurrency < 1 or max_retry_wait < 0:
            raise ValueError("timeout must be > 0, max_retries >= 0, max_concurrency >= 1 and max_retry_wait >= 0")
        key = os.environ.get(api_key_env)
        if not key:
            if base_url is None:
                raise ValueError(f"no API key: set ${api_key_env} (or --api-key-env), or give --base-url "
                                 "for a local server")
            key = "EMPTY"  # local servers (vLLM, llama.cpp, Ollama) accept any key
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.max_retry_wait = float(max_retry_wait)
        self.prices = prices if isinstance(prices, PriceTable) else PriceTable.load(prices)
        self.cache = ResponseCache(cache_dir) if cache_dir else None
        self.seed = seed
        self.sleep = sleep
        self._jitter = random.Random(seed)
        with _SHARED_LOCK:
            self._slots = _SLOTS.setdefault((base_url or "", max_concurrency),
                                            threading.BoundedSemaphore(max_concurrency))
            sdk_key = (base_url or "", key, self.timeout)
            if sdk_key not in _SDKS:
                _SDKS[sdk_key] = openai.OpenAI(api_key=key, base_url=base_url, max_retries=0, timeout=self.timeout)
            self._sdk = _SDKS[sdk_key]
        # parameters some endpoints reject; adapted on the first 400 that names them
        self._max_tokens_param = "max_tokens"
        self._send_temperature = True

    # ------------------------------------------------------------------ public
    def chat(self, messages: list[dict], tools: list[dict] | None = None, temperature: float | None = None,
             max_tokens: int | None = None) -> ChatReply:
        """One chat completion; raises LLMCallError when it fails for good."""
        start = time.monotonic()
        while True:
            body: dict[str, Any] = {"model": self.model, "messages": messages}
            if tools:
                body["tools"] = tools
            if temperature is not None and self._send_temperature:
                body["temperature"] = temperature
            if max_tokens is not None:
                body[self._max_tokens_param] = max_tokens
            try:
                data, errors, hit = self._cached_call(body, lambda: self._read_within(body))
            except openai.BadRequestError as exc:
                if not self._adapt(exc, body):
                    raise self._bad_request(exc, bool(tools)) from None
                continue
            reply = _reply_from_dict(data, self.model, self.prices, messages, self.base_url)
            reply.retries, reply.attempt_errors, reply.from_cache = len(errors), errors, hit
            reply.latency = round(time.monotonic() - start, 4)
            if hit and reply.usage.cost is not None:
                reply.usage.cost = 0.0  # a cached reply is not paid again
            return reply

    def _read_within(self, body: dict) -> dict:
        """One request whose reply must arrive whole within `timeout` seconds of wall clock: the body is read
        as it comes and the connection closed at the deadline (the HTTP client's own timeout bounds each read,
        so a server sending a byte now and then would otherwise hold the call, and the run, without limit)."""
        deadline = time.monotonic() + self.timeout
        with self._sdk.chat.completions.with_streaming_response.create(**body) as response:
            chunks = []
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise openai.APITimeoutError(request=response.http_request)
        return json.loads(b"".join(chunks) or b"null")

    def embed(self, texts: list[str], model: str) -> tuple[list[list[float]], CallUsage]:
        """Embedding vectors of `texts` from the endpoint's /embeddings route."""
        body = {"model": model, "input": list(texts)}
        try:
            data, _, hit = self._cached_call(body, lambda: self._sdk.embeddings.create(**body))
        except openai.BadRequestError as exc:
            raise self._bad_request(exc, False) from None
        rows = sorted(data.get("data") or [], key=lambda r: r.get("index", 0))
        if len(rows) != len(texts):
            raise LLMCallError(f"embeddings: asked for {len(texts)} vectors, got {len(rows)}")
        prompt = int((data.get("usage") or {}).get("prompt_tokens") or 0)
        cost = self.prices.cost(model, prompt, 0, base_url=self.base_url)
        usage = CallUsage(prompt=prompt, cost=0.0 if hit and cost is not None else cost)
        return [list(map(float, r["embedding"])) for r in rows], usage

    # ------------------------------------------------------------------ internals
    def _cached_call(self, body: dict, send: Callable[[], Any]) -> tuple[dict, list[str], bool]:
        key = request_key({"request": body, "seed": self.seed}) if self.cache is not None else ""
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                return hit, [], True
        data, errors = self._with_retries(send)
        if self.cache is not None:
            self.cache.put(key, data)
        return data, errors, False

    def _wait(self, state) -> float:
        """tenacity's wait: the server's Retry-After when it sent one (the cap is checked when the
        attempt fails), else exponential backoff with jitter up to max_backoff."""
        hint = getattr(state.outcome.exception(), "wait", None)
        if hint is not None:
            return hint
        return min(self.backoff * 2 ** (state.attempt_number - 1) * (0.5 + 0.5 * self._jitter.random()),
                   self.max_backoff)

    def _with_retries(self, send: Callable[[], Any], attempts: int | None = None) -> tuple[dict, list[str]]:
        """(reply as a dict, why each failed attempt failed) or LLMCallError."""
        errors: list[str] = []
        retrying = Retrying(stop=stop_after_attempt((self.max_retries if attempts is None else attempts - 1) + 1),
                            wait=self._wait, retry=retry_if_exception_type(_Retryable), sleep=self.sleep,
                            reraise=True)
        try:
            for attempt in retrying:
                with attempt:
                    try:
                        return self._attempt(send, len(errors) + 1), errors
                    except _Retryable as exc:
                        errors.append(str(exc))
                        raise
        except _Retryable as exc:
            raise LLMCallError(f"{self.model}: {exc} (gave up after {len(errors)} attempts)",
                               attempts=len(errors), attempt_errors=errors) from None
        raise AssertionError("unreachable")

    def _attempt(self, send: Callable[[], Any], number: int) -> dict:
        """One attempt: the reply, or _Retryable for a failure another attempt may not repeat."""
        try:
            with self._slots:
                result = send()
        except openai.BadRequestError:
            raise
        except openai.APITimeoutError:
            raise _Retryable(f"no reply within {self.timeout:g} s") from None
        except openai.APIConnectionError as exc:
            raise _Retryable(f"connection failed ({exc.__cause__ or exc})") from None
        except openai.APIResponseValidationError as exc:
            raise _Retryable(f"malformed response ({exc.message})") from None
        except json.JSONDecodeError as exc:  # e.g. a gateway's HTML error page sent with 200
            raise _Retryable(f"reply is not JSON ({exc})") from None
        except openai.APIStatusError as exc:
            if exc.status_code not in RETRY_STATUSES:
                raise self._fatal(exc, number) from None
            wait = retry_after(exc.response.headers)
            if wait is not None and wait > self.max_retry_wait:
                raise LLMCallError(f"{self.model}: HTTP {exc.status_code}: the server asks to retry after "
                                   f"{wait:g} s, more than max_retry_wait {self.max_retry_wait:g} s (raise it with "
                                   "--agent-arg max_retry_wait=SECONDS, or retry later)",
                                   status=exc.status_code, attempts=number) from None
            raise _Retryable(f"HTTP {exc.status_code}: {_brief(exc)}", wait) from None
        data = result.model_dump(mode="json", exclude_unset=False) if hasattr(result, "model_dump") else result
        if not isinstance(data, dict) or not (data.get("choices") or data.get("data")):
            raise _Retryable("HTTP 200 with an empty reply (no body or no choices)")
        return data

    def check(self, timeout: float = 30.0) -> None:
        """The pre-flight call: one tiny completion (no retries on a connection error). Raises
        LLMCallError with one line naming the fix: the key, the model name or the base URL."""
        where = self.base_url or "the OpenAI API"
        sdk = self._sdk.with_options(timeout=min(self.timeout, timeout))
        body: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": "Reply with OK."}],
                                self._max_tokens_param: 16}
        for _ in range(3):
            try:
                self._with_retries(lambda: sdk.chat.completions.create(**body), attempts=min(self.max_retries, 1) + 1)
                return
            except openai.BadRequestError as exc:
                if self._adapt(exc, body):
                    body[self._max_tokens_param] = body.pop("max_tokens", None) or body.get(self._max_tokens_param)
                    body.pop("temperature", None)
                    continue
                text = _brief(exc)
                hint = " (check --model)" if "model" in text.lower() else ""
                raise LLMCallError(f"pre-flight: {where} rejected a test call to {self.model!r}: HTTP 400: "
                                   f"{text}{hint}", status=400) from None
            except LLMCallError as exc:
                raise LLMCallError(self._preflight_hint(exc, where), status=exc.status) from None
        raise LLMCallError(f"pre-flight: {where} kept rejecting the test call's parameters")

    def _preflight_hint(self, exc: LLMCallError, where: str) -> str:
        text = exc.attempt_errors[-1] if exc.attempt_errors else str(exc).removeprefix(f"{self.model}: ")
        if exc.status in (401, 403):
            return (f"pre-flight: {where} rejected the API key in ${self.api_key_env} ({text.split(' (check')[0]}): "
                    f"set ${self.api_key_env} to a valid key, or name another variable with --api-key-env")
        if exc.status == 404:
            return (f"pre-flight: model {self.model!r} not found at {where} ({text}): check --model"
                    + self._listed_models())
        if exc.status is None and ("connection failed" in text or "no reply within" in text):
            return (f"pre-flight: cannot reach {where} ({text}, {len(exc.attempt_errors)} attempts): check --base-url "
                    "and that the server is running")
        return f"pre-flight: the test call to {self.model!r} at {where} failed ({text})"

    def _listed_models(self) -> str:
        try:
            names = [m.id for m in self._sdk.with_options(timeout=10).models.list()]
        except Exception:  # a listing is a courtesy; many endpoints have none
            return ""
        return f" (the endpoint lists: {', '.join(names[:12])})" if names else ""

    def _adapt(self, exc: openai.BadRequestError, body: dict) -> bool:
        """Switch away from a parameter the endpoint says it does not support; False if none applies."""
        text = _brief(exc).lower()
        if "max_tokens" in body and "max_completion_tokens" in text and self._max_tokens_param == "max_tokens":
            self._max_tokens_param = "max_completion_tokens"
            return True
        if "temperature" in body and "temperature" in text and self._send_temperature and \
                any(w in text for w in ("unsupported", "not support", "does not support", "only the default")):
            self._send_temperature = False
            return True
        return False

    def _bad_request(self, exc: openai.BadRequestError, with_tools: bool) -> LLMCallError:
        text = _brief(exc)
        if with_tools and "tool" in text.lower():
            return ToolsUnsupported(f"{self.model}: the endpoint rejected tools ({text})", status=400)
        if any(w in text.lower() for w in CONTEXT_WORDS) or getattr(exc, "code", None) == "context_length_exceeded":
            return ContextTooLong(f"{self.model}: HTTP 400: the prompt exceeds the model's context ({text})", status=400)
        return LLMCallError(f"{self.model}: HTTP 400: {text}", status=400)

    def _fatal(self, exc: openai.APIStatusError, attempts: int) -> LLMCallError:
        hint = f" (check ${self.api_key_env})" if exc.status_code in (401, 403) else ""
        return LLMCallError(f"{self.model}: HTTP {exc.status_code}: {_brief(exc)}{hint}",
                            status=exc.status_code, attempts=attempts)


def _brief(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        body = body.get("error", body)
        if isinstance(body, dict):
            body = body.get("message", body)
    text = str(body if body else exc.message)
    return text[:300]
