"""Public text says what KIND of latent structure exists, never which: no latent value of an env's
canonical world (`public_secrets()`) may appear in any text an agent (or a model trained on this
repository) can read: README.md, docs/*.md, module docstrings of envs/<task>/*.py and agents/*.py,
comments in tasks/<task>/*.yaml, the agent card and spec card (brief, reward, feedback, action
grammar, variant names and descriptions), tool descriptions and error messages (the observations
of malformed actions). Matching is case-insensitive and token-boundary aware ("352.0" does not
match "352.05"). An env that declares no secrets fails too: the test would check nothing.
"""
from __future__ import annotations

import ast
import json
import re
from functools import cache
from pathlib import Path

import pytest

from clbench.registry import clbench_env_ids, env_class

REPO = Path(__file__).resolve().parents[1]
#: malformed actions whose error messages are public text
MALFORMED = ["", "?", "hello world", "{}", '{"tool": "no_such_tool", "arguments": {}}', "[1, 2", "x" * 50]


def docstring(path: Path) -> str:
    try:
        return ast.get_docstring(ast.parse(path.read_text())) or ""
    except SyntaxError:
        return ""


def yaml_comments(path: Path) -> str:
    """The comments of a YAML file (the text after a `#` that starts a comment)."""
    out = []
    for line in path.read_text().splitlines():
        m = re.search(r"(?:^|\s)#(.*)$", line)
        if m and line.count('"', 0, m.start()) % 2 == 0 and line.count("'", 0, m.start()) % 2 == 0:
            out.append(m.group(1))
    return "\n".join(out)


@cache
def repo_texts() -> dict[str, str]:
    """Public text every env shares: the README, docs, and every agent module's docstring."""
    texts = {"README.md": (REPO / "README.md").read_text()}
    texts.update({str(p.relative_to(REPO)): p.read_text() for p in sorted((REPO / "docs").glob("*.md"))})
    texts.update({f"{p.relative_to(REPO)} (docstring)": docstring(p) for p in sorted((REPO / "agents").rglob("*.py"))})
    return texts


def card_texts(card: dict) -> dict[str, str]:
    out = {f"card.{k}": str(card.get(k) or "") for k in ("brief", "reward", "feedback", "action_grammar")}
    for v in card.get("variants") or []:
        out[f"card.variant {v['name']}"] = f"{v['name']}\n{v.get('description', '')}"
    return out


def env_texts(env_id: str) -> tuple[dict[str, str], str | None]:
    """The env's own public text, and why its live part (cards, tools, errors) is missing, if it is."""
    cls = env_class(env_id)
    task = cls.task
    texts = {f"envs/{task}/{p.name} (docstring)": docstring(p) for p in sorted((REPO / "envs" / task).glob("*.py"))}
    texts.update({f"tasks/{task}/{p.name} (comments)": yaml_comments(p)
                  for p in sorted((REPO / "tasks" / task).rglob("*.yaml"))})
    try:
        import gymnasium as gym

        env = gym.make(env_id)
    except Exception as exc:  # noqa: BLE001 - e.g. a sandbox that cannot start here
        return texts, f"{type(exc).__name__}: {str(exc)[:200]}"
    try:
        base = env.unwrapped
        texts.update(card_texts(base.agent_card))
        texts.update({k.replace("card.", "spec_card."): v for k, v in card_texts(base.spec_card).items()})
        texts["tools"] = "\n".join(json.dumps(t, sort_keys=True) for t in base.tools)
        texts["error messages"] = error_messages(env)
    except Exception as exc:  # noqa: BLE001 - an instance that cannot start here (its sandbox)
        return texts, f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        env.close()
    return texts, None


def error_messages(env) -> str:
    """The env's error messages for malformed actions (and for each tool called with no arguments):
    the text of every "Invalid action" observation, not what a valid call shows (a tool that needs no
    argument returns the instance's own data, which the agent is meant to read)."""
    base = env.unwrapped
    errors = []
    env.reset(seed=0)
    for action in MALFORMED + [json.dumps({"tool": t["function"]["name"], "arguments": {}}) for t in base.tools]:
        obs, _, term, trunc, _ = env.step(action)
        if obs.startswith("Invalid action"):
            errors.append(obs)
        if term or trunc:
            env.reset()
    return "\n".join(errors)


def pattern(secret: str) -> re.Pattern:
    """`secret` as a whole token, any case: not inside a longer word or number."""
    return re.compile(r"(?<![A-Za-z0-9_])" + re.escape(secret) + r"(?![A-Za-z0-9_]|\.\d)", re.IGNORECASE)


def leaks(texts: dict[str, str], secrets: list[str]) -> list[str]:
    """Every (source, secret) where a secret appears, with its context."""
    found = []
    for secret in secrets:
        pat = pattern(str(secret))
        for source, text in texts.items():
            m = pat.search(text)
            if m:
                context = text[max(0, m.start() - 40):m.end() + 40].replace("\n", " ")
                found.append(f"{secret!r} in {source}: ...{context}...")
    return found


@pytest.mark.parametrize("env_id", clbench_env_ids())
def test_public_text_names_no_latent_value(env_id):
    secrets = list(env_class(env_id).public_secrets())
    assert secrets, (f"{env_id}.public_secrets() is empty: declare the canonical world's latent values "
                     "(names, units, codes, frequencies, parameters, effects, codings, facts) as they would appear in text")
    texts, missing = env_texts(env_id)
    found = leaks({**repo_texts(), **texts}, secrets)
    assert not found, "\n".join(found)
    if missing:
        pytest.skip(f"cards, tools and error messages not checked: the env cannot be made here ({missing})")


def test_the_scan_finds_a_planted_secret():
    texts = {"README.md": "Prices are stored in different units per group.",
             "docs/x.md": "The table ITEMS_G1 holds cents; channel 352.0 MHz is re-tuned.",
             "card.brief": "Find the band plan (352.05 is not a channel)."}
    found = leaks(texts, ["items_g1", "352.0", "cents", "widgets"])
    assert len(found) == 3 and all("docs/x.md" in f for f in found)
    assert leaks(texts, ["352"]) == []  # "352.0" and "352.05": a number's prefix is no match
    assert leaks({"a": "items_g12 and xitems_g1"}, ["items_g1"]) == []


def test_the_scan_reads_docstrings_and_yaml_comments(tmp_path):
    py = tmp_path / "m.py"
    py.write_text('"""Opponent Mara bluffs 30% of the time."""\nx = 1\n')
    yml = tmp_path / "t.yaml"
    yml.write_text('units: cents  # stored in cents\nname: "a # not a comment"\n')
    assert "30%" in docstring(py)
    assert yaml_comments(yml).strip() == "stored in cents"
    assert leaks({"d": docstring(py)}, ["30%"])  # a value ending in punctuation still matches


def test_agents_are_shown_the_agent_card_only():
    import gymnasium as gym

    from clbench.agent import AgentCard, make_agent
    from clbench.env import SpecCard

    env = gym.make("clbench/SpectrumMonitor-v6")
    try:
        reference, oracle = make_agent("reference", env), make_agent("oracle", env)
        assert isinstance(reference.card, AgentCard) and dict(reference.card) == env.unwrapped.agent_card
        assert "variants" not in reference.card and "r_reference" not in reference.card
        with pytest.raises(AttributeError, match="agent card"):
            reference.card.variants  # noqa: B018 - the documentation fields are not there
        assert reference.card.brief and reference.card.max_steps == env.unwrapped.max_steps
        assert isinstance(oracle.card, SpecCard)  # privileged agents may read the spec card
    finally:
        env.close()
