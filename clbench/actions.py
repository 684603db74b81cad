"""Parsing of agent replies: JSON tool calls and per-env text grammars.

Every env accepts `{"tool": name, "arguments": {...}}` (also the OpenAI shape
`{"name": ..., "arguments": "<json string>"}`), validated against the env's tool schemas with
jsonschema. Anything else goes to the env's own text grammar. Problems raise `ActionError`,
whose message is shown to the agent; they never escape `step()`.
"""
from __future__ import annotations

import functools
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any


class ActionError(ValueError):
    """A malformed or illegal action; the message tells the agent what was wrong."""


@dataclass(frozen=True)
class ToolCall:
    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)


def tool_schema(name: str, description: str, properties: dict, required: list[str] | None = None) -> dict:
    """An OpenAI function-calling tool description."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(properties) if required is None else required,
                "additionalProperties": False,
            },
        },
    }


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
#: parse attempts per reply: each can cost O(length), so a 100 KB reply of brackets stays cheap
MAX_JSON_ATTEMPTS = 16
#: what `json` raises on bad input: syntax, nesting too deep, integers over Python's digit limit
JSON_ERRORS = (ValueError, RecursionError)


def extract_json(text: str) -> Any | None:
    """The first JSON object in `text` (bare, fenced in ``` or embedded in prose), else None."""
    stripped = text.strip()
    fences = (m.group(1).strip() for m in _FENCE.finditer(text))
    starts = (m.start() for m in re.finditer(r"\{", text))
    decoder = json.JSONDecoder()
    attempts = 0
    for cand in (stripped, *itertools.islice(fences, MAX_JSON_ATTEMPTS)):
        if cand.startswith(("{", "[")):
            attempts += 1
            try:
                return json.loads(cand)
            except JSON_ERRORS:
                pass
    for start in itertools.islice(starts, max(1, MAX_JSON_ATTEMPTS - attempts)):
        try:
            return decoder.raw_decode(text, start)[0]
        except JSON_ERRORS:
            continue
    return None


def as_tool_call(obj: Any) -> ToolCall | None:
    """Interpret a decoded JSON value as a tool call, or None if it is not shaped like one."""
    if not isinstance(obj, dict):
        return None
    if "function" in obj and isinstance(obj["function"], dict):  # OpenAI tool_call object
        obj = obj["function"]
    name = obj.get("tool", obj.get("name"))
    if not isinstance(name, str) or ("arguments" not in obj and "tool" not in obj):
        return None
    args = obj.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except JSON_ERRORS as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)[:200]
            raise ActionError(f"tool call {name!r}: arguments are not valid JSON ({why})") from None
    if not isinstance(args, dict):
        raise ActionError(f"tool call {name!r}: arguments must be a JSON object")
    return ToolCall(name, args)


def checked_validator(schema: dict):
    """A validator for `schema`, the schema checked once: what jsonschema.validate rebuilds (and
    re-checks) on every call. Callers cache it."""
    import jsonschema  # lazily: its import is a third of a fresh env's load

    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@functools.lru_cache(maxsize=512)
def _validator(schema_json: str):
    return checked_validator(json.loads(schema_json))


def validate_call(call: ToolCall, tools: list[dict]) -> ToolCall:
    """Check a call against the tool schemas; raise ActionError naming the legal tools."""
    from jsonschema.exceptions import best_match

    by_name = {t["function"]["name"]: t["function"] for t in tools}
    if call.tool not in by_name:
        raise ActionError(f"unknown tool {call.tool!r}; available tools: {', '.join(sorted(by_name))}")
    validator = _validator(json.dumps(by_name[call.tool]["parameters"], sort_keys=True))
    exc = best_match(validator.iter_errors(call.arguments))  # the error jsonschema.validate raises
    if exc is not None:
        where = "/".join(str(p) for p in exc.absolute_path) or "arguments"
        raise ActionError(f"tool {call.tool!r}: {where}: {exc.message}")
    return call


@functools.lru_cache(maxsize=256)
def _prefix_pattern(prefix: str) -> re.Pattern:
    """`PREFIX: rest`, compiled once per prefix (building the pattern cost more than matching it)."""
    return re.compile(rf"{re.escape(prefix)}\b\s*:?\s*(.*)\Z", re.IGNORECASE | re.DOTALL)


def parse_prefixed(text: str, commands: dict[str, tuple[str, str | None]]) -> ToolCall | None:
    """Text grammar `PREFIX: rest` -> ToolCall(tool, {arg: rest}); case-insensitive prefix.

    `commands` maps a prefix (e.g. "QUERY") to (tool name, argument name or None).
    """
    stripped = text.strip()
    for prefix, (tool, arg) in commands.items():
        m = _prefix_pattern(prefix).match(stripped)
        if m:
            rest = m.group(1).strip()
            return ToolCall(tool, {arg: rest} if arg else {})
    return None
