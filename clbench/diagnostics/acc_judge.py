"""ACC's agent judge: a model, reached through clbench's OpenAI-compatible client, decides for
each claim an agent made whether the record supports it (else: a hallucination) and whether it
contradicts the current constraints while the record supports it (a superseded claim: drift).

For free-text claims, where no env can check them by rule. On MemoryProbe the env classifies every
answer itself (clbench.diagnostics.acc_measures); `memoryprobe_claims` turns a rollout's answers
into claims with their evidence (every statement about the key so far) and current value, so the
judge can be checked against the deterministic classification.

    from clbench.diagnostics.acc_judge import Judge, judged_rates
    judge = Judge(model="M", base_url="http://localhost:8000/v1")
    judged_rates(judge, claims)
"""
from __future__ import annotations

import json
import re

SYSTEM = (
    "You check claims an assistant made against the record of what it was told. For the claim, decide: "
    "supported = the record states the claimed value for this subject (now or earlier); contradicts_current = "
    "the claimed value differs from the current value. Reply with one JSON object only: "
    '{"supported": true|false, "contradicts_current": true|false}')
_ANSWER = re.compile(r"^ANSWER\s+(\S+?)\s*:[ \t]*(.*?)\s*$", re.MULTILINE | re.IGNORECASE)


class Judge:
    """A judge model at an OpenAI-compatible endpoint (clbench.llm.ChatClient)."""

    def __init__(self, model: str, base_url: str | None = None, **client_kwargs):
        from clbench.llm.client import ChatClient

        self.client = ChatClient(model, base_url=base_url, **client_kwargs)

    def __call__(self, claim: str, evidence: list[str], current: str) -> dict:
        material = json.dumps({"claim": claim, "record": evidence, "current": current}, indent=1)
        reply = self.client.chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": material}],
                                 temperature=0.0, max_tokens=200)
        found = re.search(r"\{.*\}", reply.content or "", re.DOTALL)
        try:
            verdict = json.loads(found.group(0)) if found else {}
        except ValueError:
            verdict = {}
        if not isinstance(verdict.get("supported"), bool) or not isinstance(verdict.get("contradicts_current"), bool):
            return {"supported": None, "contradicts_current": None, "error": f"unreadable verdict: {reply.content!r:.200}"}
        return {"supported": verdict["supported"], "contradicts_current": verdict["contradicts_current"]}


def judged_rates(judge, claims: list[dict]) -> dict:
    """Hallucination rate (claims the record does not support) and drift rate (supported claims that
    contradict the current value) over the claims the judge could decide."""
    verdicts = [{**c, **judge(c["claim"], c["evidence"], c["current"])} for c in claims]
    decided = [v for v in verdicts if v["supported"] is not None]
    n = len(decided)
    return {"claims": len(claims), "decided": n,
            "hallucination_rate": sum(not v["supported"] for v in decided) / n if n else None,
            "drift_rate": sum(v["supported"] and v["contradicts_current"] for v in decided) / n if n else None,
            "verdicts": verdicts}


def memoryprobe_claims(env_id: str, sessions: list[dict], env_kwargs: dict | None = None) -> list[dict]:
    """Claims of a MemoryProbe rollout (clbench.diagnostics.play.play_rollout): every answer that does
    not abstain, as "<key>: <answer>", with every statement about the key up to that session (the
    mentions of the key and, for a key that follows another, of that key) and the current value."""
    from clbench.runner import make_env

    env = make_env(env_id, **(env_kwargs or {}))
    try:
        base = env.unwrapped
        base.reset(seed=0)
        claims = []
        for s in sessions:
            asked = base.questions(s["instance_id"])
            alias = {f"q{i + 1}": q.qid.lower() for i, q in enumerate(asked)}  # "Q2" names the second question
            answers = {alias.get(qid.lower(), qid.lower()): value for qid, value in _ANSWER.findall(s.get("action") or "")}
            questions = {q.qid: q for q in asked}
            upto = base.order[:s["position"] + 1]
            for o in s["outcomes"]:
                if o.get("verdict") == "abstained":
                    continue
                q = questions[o["qid"]]
                keys = {q.key} | {n.mention.key for n in q.needs}
                evidence = [m.text for slot in upto for m in slot.instance.payload.mentions if m.key in keys]
                claims.append({"qid": q.qid, "claim": f"{q.key}: {answers.get(q.qid.lower(), '')}",
                               "evidence": evidence, "current": f"{q.key}: {q.answer}", "error": o.get("error", ""),
                               "structure": q.structure})
        return claims
    finally:
        env.close()
