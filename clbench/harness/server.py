"""The MCP server of a `Bridge` (clbench.harness.bridge), over streamable HTTP or stdio.

Built on the `mcp` SDK's low-level `Server`: tools come from the env's JSON schemas as they are
(no re-declaration), so the tools a harness sees over MCP are exactly `env.unwrapped.tools`.
"""
from __future__ import annotations

import json
import socket
import threading
import time

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from clbench.harness.bridge import Bridge

#: JSON-RPC's "invalid params": an unknown prompt or resource is the caller's mistake, not the server's
INVALID_PARAMS = -32602
INSTANCE_URI = "clbench://instance"
CARD_URI = "clbench://agent-card"


def instructions(card: dict) -> str:
    """The server's instructions: everything the agent card says in words."""
    parts = [card.get("brief", ""), "Reward: " + card.get("reward", ""), "Feedback: " + card.get("feedback", ""),
             "Actions: " + card.get("action_grammar", ""),
             "Each tool call is one step of the current instance. The prompt 'instance' (or the resource "
             f"{INSTANCE_URI}) holds the instance's first observation; every tool result is the next observation."]
    return "\n\n".join(p for p in parts if p.strip())


def _tool(schema: dict) -> types.Tool:
    fn = schema["function"]
    return types.Tool(name=fn["name"], description=fn.get("description", ""),
                      input_schema=fn.get("parameters") or {"type": "object", "properties": {}})


def _instance_text(bridge: Bridge) -> tuple[str, dict]:
    current = bridge.current()
    if current is None:
        return "No instance is open: the run is over or between instances.", {}
    return current


def build_server(bridge: Bridge, name: str = "clbench") -> Server:
    """A low-level MCP server whose handlers forward to `bridge` (blocking work in worker threads)."""
    tools = [_tool(t) for t in bridge.card.get("tools", [])]

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params: types.CallToolRequestParams):
        args = params.arguments if isinstance(params.arguments, dict) else {}
        result = await anyio.to_thread.run_sync(bridge.call, params.name, args, abandon_on_cancel=True)
        structured = {**result.info, "done": result.done}
        return types.CallToolResult(content=[types.TextContent(type="text", text=result.text)],
                                    structured_content=structured, is_error=result.error)

    async def list_prompts(ctx, params):
        return types.ListPromptsResult(prompts=[types.Prompt(
            name="instance", description="The current instance's first observation, with the task's brief.")])

    async def get_prompt(ctx, params: types.GetPromptRequestParams):
        if params.name != "instance":
            raise MCPError(INVALID_PARAMS, f"unknown prompt {params.name!r}; the prompt is 'instance'")
        text, info = await anyio.to_thread.run_sync(_instance_text, bridge, abandon_on_cancel=True)
        return types.GetPromptResult(description=json.dumps(info), messages=[types.PromptMessage(
            role="user", content=types.TextContent(type="text", text=text))])

    async def list_resources(ctx, params):
        return types.ListResourcesResult(resources=[
            types.Resource(uri=INSTANCE_URI, name="instance", mime_type="application/json",
                           description="The current instance: its first observation and public info."),
            types.Resource(uri=CARD_URI, name="agent-card", mime_type="application/json",
                           description="What the agent is told about the task (brief, reward, tools).")])

    async def read_resource(ctx, params: types.ReadResourceRequestParams):
        uri = str(params.uri)
        if uri == CARD_URI:
            body = bridge.card
        elif uri == INSTANCE_URI:
            text, info = await anyio.to_thread.run_sync(_instance_text, bridge, abandon_on_cancel=True)
            body = {"observation": text, "info": info}
        else:
            raise MCPError(INVALID_PARAMS, f"unknown resource {uri!r}; the resources are {INSTANCE_URI} and {CARD_URI}")
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=uri, mime_type="application/json", text=json.dumps(body))])

    return Server(name, instructions=instructions(bridge.card), on_list_tools=list_tools,
                  on_call_tool=call_tool, on_list_prompts=list_prompts, on_get_prompt=get_prompt,
                  on_list_resources=list_resources, on_read_resource=read_resource)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    """`build_server(bridge)` over streamable HTTP at http://127.0.0.1:PORT/mcp, in a daemon thread."""

    def __init__(self, bridge: Bridge, port: int = 0):
        import uvicorn

        self.port = port or free_port()
        app = build_server(bridge).streamable_http_app(host="127.0.0.1")
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=f"clbench-mcp-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the MCP server did not start on 127.0.0.1:{self.port}")
            time.sleep(0.01)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def close(self, linger: float = 10.0) -> None:
        """Stop serving once the client has hung up (its last connection closed: ending its MCP session
        after the last reply is one more request), or after `linger` seconds."""
        deadline = time.monotonic() + linger
        while self._server.server_state.connections and time.monotonic() < deadline:
            time.sleep(0.05)
        self._server.should_exit = True
        self._thread.join(timeout=10)


def serve_stdio(bridge: Bridge) -> threading.Thread:
    """`build_server(bridge)` over this process's stdin/stdout, in a daemon thread (stdout is the wire:
    nothing else may print to it)."""
    from mcp.server.stdio import stdio_server

    server = build_server(bridge)

    async def main():
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    thread = threading.Thread(target=anyio.run, args=(main,), name="clbench-mcp-stdio", daemon=True)
    thread.start()
    return thread
