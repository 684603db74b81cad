"""A real local HTTP server speaking the OpenAI chat-completions protocol, for tests.

`ScriptedServer` (stdlib http.server in a thread) serves POST /v1/chat/completions,
POST /v1/embeddings and GET /v1/models. Replies come from a scripted policy:

* `ReferencePolicy(env_id)` plays the env's scripted `reference` agent from the prompt alone:
  it finds the instance blocks in the conversation ("Instance k of n: id" headers written by
  the LLM agent), replays every earlier block through a fresh reference agent, then acts on the
  current block. So a memory that carries earlier transcripts into the prompt (icl) makes it
  play like the stateful reference, and no memory like the stateless one. When the request
  offers tools it answers with native tool calls; it reads memory files when offered the tool.
  Memory-update requests ("Memory task: KIND" in the system message) get schema-valid JSON
  built from the outcome lines in the material.
* `FixedPolicy(text)` always says `text`.

Usage is reported like a provider would: prompt and completion tokens (4 characters a token),
cached tokens for the prefix shared with an earlier prompt (in 64-token blocks) and optional
reasoning tokens. Fault injection: queue `Fault`s in `server.faults`; each chat request takes
the next one (429 with Retry-After, 500, a hang, a malformed tool call, an empty reply, a fixed
text). The server can also refuse `tools` or `max_tokens` the way real endpoints do.
"""
from __future__ import annotations

import json
import re
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym

import clbench  # noqa: F401  registers the envs
from clbench.agent import end_instance, make_agent

HEADER = re.compile(r"^Instance (\d+) of (\d+): (\S+)$", re.MULTILINE)
OUTCOME = re.compile(r"^Outcome of (\S+): reward ([-\d.eE+]+).*$", re.MULTILINE)
MEMORY_TASK = re.compile(r"^Memory task: ([\w-]+)", re.MULTILINE)
MEMORY_FILE = re.compile(r"^- ([A-Za-z0-9][A-Za-z0-9._-]*) \(\d+ chars\)", re.MULTILINE)
READ_TOOL = "read_memory_file"


def tokens(text: str) -> int:
    return (len(text) + 3) // 4


@dataclass
class Fault:
    """One injected fault: rate_limit, server_error, unauthorized, garbage (an HTML page sent with
    200), null (a `null` body sent with 200), no_choices (200 with an empty choices list), hang,
    malformed_tool_call, empty, reply (a fixed text), parts (the policy's reply as a list of content parts,
    its tool call written as JSON text), refusal (no content, a `refusal` message), length (the policy's
    reply as JSON text cut to 20 characters, finish_reason "length"), drip (a normal reply sent 8 bytes every
    `seconds`), context (HTTP 400: the prompt exceeds the model's context) or none (a normal reply: lets a
    later fault hit a chosen request)."""

    kind: str
    retry_after: str = "0"
    seconds: float = 0.0
    content: str = ""


class FixedPolicy:
    def __init__(self, text: str = "pong"):
        self.text = text

    def __call__(self, body: dict) -> dict:
        return {"content": self.text}


def _blocks(messages: list[dict]) -> list[dict]:
    """Instance blocks of a conversation: {"id", "position", "observations", "read_file"}."""
    blocks: list[dict] = []
    memory_call_ids = set()
    for m in messages:
        role, content = m["role"], m.get("content") or ""
        if role == "assistant":
            for tc in m.get("tool_calls") or []:
                if tc["function"]["name"] == READ_TOOL:
                    memory_call_ids.add(tc["id"])
                    content += READ_TOOL
            if blocks and READ_TOOL in content:
                blocks[-1]["read_file"] = True
            continue
        if role == "tool":
            if m.get("tool_call_id") not in memory_call_ids and blocks:
                blocks[-1]["observations"].append(content)
            continue
        if role != "user" or content.startswith(f"[{READ_TOOL} result]"):
            continue
        headers = list(HEADER.finditer(content))
        outcome = OUTCOME.search(content[:headers[0].start()] if headers else content)
        if blocks and outcome:  # the last instance's outcome and the env's feedback, for end_instance
            blocks[-1]["outcome"] = (content[:headers[0].start()] if headers else content)[outcome.start():]
        if not headers:
            if blocks and not outcome:
                blocks[-1]["observations"].append(content)
            continue
        for h, nxt in zip(headers, headers[1:] + [None]):
            obs = content[h.end() + 1: nxt.start() if nxt else None]
            blocks.append({"id": h.group(3), "position": int(h.group(1)) - 1, "observations": [obs],
                           "read_file": False})
    return blocks


class ReferencePolicy:
    """Plays an env's scripted agent from the prompt (see the module docstring)."""

    def __init__(self, env_id: str, agent: str = "reference", **env_kwargs):
        self.env = gym.make(env_id, **env_kwargs).unwrapped
        self.agent_name = agent
        self._lock = threading.Lock()  # the env is shared by request threads

    def __call__(self, body: dict) -> dict:
        system = body["messages"][0]["content"] if body["messages"][0]["role"] == "system" else ""
        task = MEMORY_TASK.search(system)
        if task:
            return {"content": memory_reply(task.group(1), body["messages"][-1]["content"])}
        blocks = _blocks(body["messages"])
        files = MEMORY_FILE.findall(system)
        tool_names = {t["function"]["name"] for t in body.get("tools") or []}
        if files and blocks and not blocks[-1]["read_file"] and (READ_TOOL in tool_names or READ_TOOL in system):
            args = {"name": files[0]}
            if READ_TOOL in tool_names:
                return {"tool_calls": [(READ_TOOL, json.dumps(args))]}
            return {"content": json.dumps({"tool": READ_TOOL, "arguments": args})}
        with self._lock:
            action = self._replay(blocks)
            if not body.get("tools"):
                return {"content": action}
            call = self.env.parse_action(action)
        return {"tool_calls": [(call.tool, json.dumps(call.arguments))]}

    def _replay(self, blocks: list[dict]) -> str:
        agent = make_agent(self.agent_name, self.env, seed=0)
        action = ""
        for k, block in enumerate(blocks):
            base = {"instance_id": block["id"], "position": block["position"]}
            agent.begin_instance(block["observations"][0], {**base, "step": 0})
            for step, obs in enumerate(block["observations"]):
                action = agent.act(obs, {**base, "step": step})
            if k < len(blocks) - 1:
                outcome = block.get("outcome", "")
                reward = float(OUTCOME.search(outcome).group(2)) if outcome else 0.0
                end_instance(agent, reward, base, outcome)
        return action


def memory_reply(kind: str, material: str) -> str:
    """Schema-valid memory updates, built from the outcome lines found in the material."""
    outcomes = [m.group(0).strip() for m in OUTCOME.finditer(material)]
    last = outcomes[-1] if outcomes else "no outcome seen"
    if kind == "notepad":
        old = material.split("Current notes:\n", 1)[-1].split("\n\nThe instance that just finished:", 1)[0]
        return "\n".join(x for x in (old if old != "(empty)" else "", f"- {last}") if x)
    if kind == "sliding-summary":
        return "Earlier outcomes: " + "; ".join(outcomes)
    if kind == "retrieval":
        return json.dumps({"memories": [last]})
    if kind == "playbook-reflect":
        ids = re.findall(r"\[(b-\d+)\]", material)
        return json.dumps({"reflection": f"Seen: {last}", "key_insight": last,
                           "bullet_tags": [{"id": ids[0], "tag": "helpful"}] if ids else []})
    if kind == "playbook-curate":
        return json.dumps({"operations": [{"type": "ADD", "section": "outcomes", "content": last}]})
    if kind == "acc":
        refs = sorted(set(re.findall(r"\[(A\d+)\]", material)), key=lambda a: int(a[1:]))[-8:]
        return json.dumps({"episodic_trace": outcomes[-8:], "semantic_gist": f"Latest: {last}",
                           "focal_entities": [], "relations": [], "goal": "maximise the reward",
                           "constraints": [], "predictive_cue": "more instances of the same task",
                           "uncertainty": "the hidden structure", "artifact_refs": refs})
    if kind == "memory-bank":
        return json.dumps({"entries": [{"bank": "episodes", "content": last}]})
    if kind == "file-state":
        return json.dumps({"files": [{"name": "outcomes.md", "mode": "append", "content": last}]})
    raise ValueError(f"no scripted reply for memory task {kind!r}")


def embedding(text: str, dim: int = 64) -> list[float]:
    """Hashed bag-of-words vector, L2-normalised (deterministic)."""
    vec = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        vec[zlib.crc32(word.encode()) % dim] += 1.0
    norm = sum(v * v for v in vec) ** 0.5 or 1.0
    return [v / norm for v in vec]


def _common_prefix(a: str, b: str) -> int:
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # binary search on slice equality: C-speed compares
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class ScriptedServer:
    """Start with `with ScriptedServer(policy) as server:`; point clients at `server.base_url`."""

    def __init__(self, policy=None, *, supports_tools: bool = True, reject_max_tokens: bool = False,
                 reasoning_tokens: int = 0, report_usage: bool = True, models: tuple[str, ...] | None = None):
        self.policy = policy or FixedPolicy()
        self.supports_tools = supports_tools
        self.reject_max_tokens = reject_max_tokens
        self.reasoning_tokens = reasoning_tokens
        self.report_usage = report_usage
        self.models = models  # when given, other model names get 404 like a real endpoint
        self.faults: deque[Fault] = deque()
        self.requests: list[dict] = []
        self.embedding_requests: list[dict] = []
        self.fault_log: list[str] = []
        self.policy_errors: list[str] = []
        self.inflight = 0
        self.max_inflight = 0
        self.delay = 0.0  # seconds each chat reply takes (to observe concurrency)
        self._prompts: deque[str] = deque(maxlen=32)
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> "ScriptedServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # ------------------------------------------------------------------ replies
    def chat(self, body: dict) -> tuple[int, dict, dict]:
        """(status, headers, JSON body) for one chat request."""
        with self._lock:
            self.requests.append(body)
            fault = self.faults.popleft() if self.faults else None
        if fault:
            self.fault_log.append(fault.kind)
        if fault and fault.kind == "rate_limit":
            return 429, {"Retry-After": fault.retry_after}, _error("Rate limit reached", "rate_limit_exceeded")
        if fault and fault.kind == "server_error":
            return 500, {}, _error("The server had an error while processing your request", "server_error")
        if self.models is not None and body.get("model") not in self.models:
            return 404, {}, _error(f"The model `{body.get('model')}` does not exist or you do not have access to it.",
                                   "model_not_found")
        if fault and fault.kind == "garbage":
            return 200, {}, None
        if fault and fault.kind == "null":
            return 200, {}, "null"
        if fault and fault.kind == "no_choices":
            return 200, {}, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"], "choices": []}
        if fault and fault.kind == "context":
            return 400, {}, _error("This model's maximum context length is 8192 tokens. However, your messages "
                                   "resulted in 9461 tokens.", "context_length_exceeded", "messages")
        if fault and fault.kind == "unauthorized":
            return 401, {}, _error("Incorrect API key provided", "invalid_api_key")
        if fault and fault.kind == "hang":
            time.sleep(fault.seconds)
        if fault and fault.kind == "drip":  # a normal reply, sent 8 bytes every `seconds`
            return 200, {"_drip": fault.seconds}, self._completion(body, self.policy(body))
        if body.get("tools") and not self.supports_tools:
            return 400, {}, _error("tools are not supported by this server", "invalid_request_error", "tools")
        if self.reject_max_tokens and "max_tokens" in body:
            return 400, {}, _error("Unsupported parameter: 'max_tokens' is not supported with this model. "
                                   "Use 'max_completion_tokens' instead.", "invalid_request_error", "max_tokens")
        if fault and fault.kind == "malformed_tool_call":
            name = (body.get("tools") or [{"function": {"name": "submit_report"}}])[0]["function"]["name"]
            out = {"tool_calls": [(name, '{"transmitters": [{"center_mhz": 35')]}
        elif fault and fault.kind == "empty":
            out = {"content": ""}
        elif fault and fault.kind == "reply":
            out = {"content": fault.content}
        elif fault and fault.kind == "refusal":
            out = {"content": None, "refusal": "I'm sorry, I can't assist with that."}
        elif fault and fault.kind in ("parts", "length"):
            out = self.policy(body)
            text = out.get("content") or "".join(json.dumps({"tool": name, "arguments": json.loads(args)})
                                                 for name, args in out.get("tool_calls", []))
            out = {"content": [{"type": "text", "text": text[:len(text) // 2]}, {"type": "text", "text": text[len(text) // 2:]}]} \
                if fault.kind == "parts" else {"content": text[:20], "finish_reason": "length"}
        else:
            if self.delay:
                time.sleep(self.delay)
            out = self.policy(body)
        return 200, {}, self._completion(body, out)

    def _completion(self, body: dict, out: dict) -> dict:
        prompt_text = json.dumps(body["messages"]) + json.dumps(body.get("tools") or [])
        with self._lock:
            shared = max((_common_prefix(prompt_text, p) for p in self._prompts), default=0)
            self._prompts.append(prompt_text)
        calls = [{"id": f"call_{len(self.requests)}_{i}", "type": "function",
                  "function": {"name": name, "arguments": args}}
                 for i, (name, args) in enumerate(out.get("tool_calls", []))]
        content = out.get("content")
        message = {"role": "assistant", "content": content if content is not None or not calls else None}
        if calls:
            message["tool_calls"] = calls
        if out.get("refusal"):
            message["refusal"] = out["refusal"]
        finish = out.get("finish_reason") or ("tool_calls" if calls else "stop")
        resp = {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
                "model": body["model"], "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
        if self.report_usage:
            text = content if isinstance(content, str) else "".join(p["text"] for p in content or [])
            completion = tokens(text + "".join(c["function"]["arguments"] for c in calls))
            prompt = tokens(prompt_text)
            resp["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion + self.reasoning_tokens,
                             "total_tokens": prompt + completion + self.reasoning_tokens,
                             "prompt_tokens_details": {"cached_tokens": min(prompt, shared // 4 // 64 * 64)},
                             "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens}}
        return resp

    def embeddings(self, body: dict) -> dict:
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        with self._lock:
            self.embedding_requests.append(body)
        n = sum(tokens(t) for t in inputs)
        return {"object": "list", "model": body["model"],
                "data": [{"object": "embedding", "index": i, "embedding": embedding(t)} for i, t in enumerate(inputs)],
                "usage": {"prompt_tokens": n, "total_tokens": n}}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    names = server.models or ("scripted",)
                    self._send(200, {}, {"object": "list", "data": [{"id": n, "object": "model"} for n in names]})
                else:
                    self._send(404, {}, _error(f"no route {self.path}", "not_found"))

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server._lock:
                    server.inflight += 1
                    server.max_inflight = max(server.max_inflight, server.inflight)
                try:
                    if self.path.endswith("/chat/completions"):
                        self._send(*server.chat(body))
                    elif self.path.endswith("/embeddings"):
                        self._send(200, {}, server.embeddings(body))
                    else:
                        self._send(404, {}, _error(f"no route {self.path}", "not_found"))
                except Exception as exc:  # a policy bug must show up in the test, not hang it in retries
                    server.policy_errors.append(f"{type(exc).__name__}: {exc}")
                    self._send(400, {}, _error(f"scripted policy failed: {exc}", "policy_error"))
                finally:
                    with server._lock:
                        server.inflight -= 1

            def _send(self, status: int, headers: dict, payload: dict):
                data = b"null" if payload == "null" else json.dumps(payload).encode() if payload is not None \
                    else b"<html>Bad gateway</html>"
                headers = dict(headers)
                drip = headers.pop("_drip", None)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    if drip is None:
                        self.wfile.write(data)
                    for i in range(0, len(data), 8) if drip is not None else ():
                        self.wfile.write(data[i:i + 8])
                        self.wfile.flush()
                        time.sleep(drip)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

        return Handler


def _error(message: str, code: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": code, "param": param, "code": code}}
