"""Token counting and value matching shared by the MemoryProbe env and its scripted agents.

Tokens are words and single punctuation marks (`\\w+|[^\\w\\s]`): a deterministic stand-in for a
model tokenizer, used both for the memory budget and for fact depths.
"""
from __future__ import annotations

import re

_TOKEN = re.compile(r"\w+|[^\w\s]")
_NUMBER = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*(.*)")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3})")
_SPACE = re.compile(r"\s+")


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def normalize_key(key: str) -> str:
    """Lower-case words of a fact key, without a leading article."""
    words = re.sub(r"[^a-z0-9]+", " ", key.lower()).split()
    if words and words[0] == "the":
        words = words[1:]
    return " ".join(words)


def normalize_value(value: str) -> str:
    v = value.strip().strip("\"'`").strip()
    v = _THOUSANDS.sub("", v)  # 1,240 -> 1240
    v = v.rstrip(".!?;, ").lower()
    return _SPACE.sub("", v)


def values_match(expected: str, answer: str) -> bool:
    """Exact match after normalisation, or the same number with the same (or no) unit."""
    e, a = normalize_value(expected), normalize_value(answer)
    if not a:
        return False
    if e == a:
        return True
    me, ma = _NUMBER.fullmatch(e), _NUMBER.fullmatch(a)
    if me and ma and abs(float(me.group(1)) - float(ma.group(1))) < 1e-9:
        return ma.group(2) in ("", me.group(2))
    return False
