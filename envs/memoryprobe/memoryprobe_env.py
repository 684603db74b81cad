"""MemoryProbe-v2: recall facts planted across the sessions of one long assistant conversation."""
from __future__ import annotations

import re

from clbench.actions import ActionError, ToolCall, tool_schema
from clbench.env import InstanceSequenceEnv, Outcome, load_task_spec
from clbench.feedback import score_report
from clbench.schedule import Instance, Schedule, Slot, Variant
from clbench.envs.memoryprobe.generator import generate
from clbench.envs.memoryprobe.questions import Question, build_questions
from clbench.envs.memoryprobe.text import normalize_value, values_match

_ANSWER_LINE = re.compile(r"^\s*ANSWER\s+([A-Za-z0-9_-]+)\s*:[ \t]*(.*?)\s*$", re.IGNORECASE | re.MULTILINE)
_ALIAS = re.compile(r"^Q(\d+)$", re.IGNORECASE)  # "Q2" names the second question listed
CONVERSATION_START = "=== conversation: session {n} ==="
CONVERSATION_END = "=== end of session {n} ==="


class Chronology(Schedule):
    """A conversation has one chronology: every rollout plays the sessions in their canonical
    order (the rollout seed seeds agents only). Permuting sessions would make one session ask
    different questions, with different answers, in different rollouts."""

    def order(self, seed: int = 0) -> list[Slot]:
        return super().order(0)


class AnswerKey:
    """The oracle's view: the answers of the current rollout's questions (never shown to agents)."""

    def __init__(self, env: "MemoryProbeEnv"):
        self._env = env

    def answers(self, instance_id: str) -> dict[str, str]:
        return {q.qid: q.answer for q in self._env.questions(instance_id)}


class MemoryProbeEnv(InstanceSequenceEnv):
    """
    ## Description
    One long conversation between a software team lead and an assistant, split into sessions
    (one session = one instance). Amid ordinary team chat, facts are planted at known positions
    in four categories (configuration values, decisions, measurements, named people), either
    explicitly as a line `[FACT] key: value` or implicitly, said in passing in a sentence. Some
    keys get new values in later sessions (version chains), some have near-identical twins
    introduced at different times (confusable pairs: two service or project names one edit apart), and
    running totals (accumulators) grow by increments over many sessions, and some keys are said
    to take another key's value (multi-hop: the answer needs both facts and follows the other
    key's updates). Each session ends with
    up to 5 recall questions about keys stated so far, their source session drawn uniformly over
    the history and at most one about the session just played. The default schedule has 24
    sessions in three variants of rising pressure (light, medium, heavy). A conversation has
    one chronology, so every rollout plays the sessions in the same order (the rollout seed
    seeds the agent only) and a session asks the same questions, with the same answers, in
    every rollout and in the stateless pass. The truth of every question is replayed from the
    sessions so far (a `set` states a value or a running total, an increment adds to it).
    Agents are measured under a memory budget of 15% of the whole conversation's tokens
    (stated in the brief and in every observation) for what they carry between sessions.
    Concept drift (from the second variant on): updates grow frequent and deeper, so values
    remembered from the light sessions are superseded and answering from them is wrong; the task
    YAML declares it under `drifts`, and `clbench drift-check` reports the cost on version chains
    (superseded values) and running totals apart from facts stated once (`score_parts`).

    ## Action Space
    `Text`: one reply answering all questions, one line each, `ANSWER <qid>: <value>` (other
    lines are ignored; `Q<i>`, the question's number in the list, may stand for its qid), or
    the tool call `{"tool": "answer", "arguments": {"answers": {"<qid>":
    "<value>", ...}}}`. Questions left out count as wrong.

    ## Observation Space
    `Text` (printable ASCII): a header (session number, memory budget), the session's
    conversation between `=== conversation: session N ===` and `=== end of session N ===`, then
    the questions `Q<i> [<qid>] <question>` and the answer format. After the answer: the score
    and feedback (see Feedback).

    ## Feedback
    The terminal observation states the score (questions right of asked) and, per question, the
    agent's own answer and whether it was right. For a wrong or missing answer it says why the
    fact was hard, as the team lead would when correcting the assistant: how many sessions back
    it goes, whether its value changed after it was first stated, whether a nearly identical key
    exists, whether it is a running total, whether it was said in passing rather than as a
    [FACT] line. The correct values are never shown: a key can be asked again in a later session,
    and telling its value would let an agent answer it without having remembered the
    conversation, which is what the task measures.

    ## Rewards
    Per question: +1 for a right answer (case, spacing and thousands separators ignored; a
    number may omit its unit), 0 for a question left out or answered "unknown" (abstained), -1
    for a wrong answer; the session's reward is their sum divided by the number of questions
    (in [-1, 1]), on the answering step. A wrong answer costs what a right one earns, so a guess
    from the value domains (which are public in the vocabulary) loses in expectation: the
    memoryless prior a guess uses is worth nothing (issue 28). raw_metric =
    ("recall_accuracy", fraction right). r_max = 1.0 (the oracle); r_reference = the reference
    agent (file-backed memory with a reader of every phrasing, answering exact keys only) played
    stateless: the best a memoryless agent can do, answering what the session in view states.
    The final info holds `details["question_outcomes"]` (kept in result records): per question
    qid, key, category, structure, kind (explicit|implicit), depth (tokens back to the oldest
    needed mention), age_sessions, correct, verdict (right|wrong|abstained) and, for a wrong
    answer, its error (`superseded`: a value the key had earlier, drift; `other-key`: a value
    stated for another key; `unstated`: a value never stated, hallucination), for
    `breakdown.accuracy_breakdown` and `clbench.diagnostics.acc_measures`.

    ## Episode End
    A session ends when a valid answer is given (all questions are answered in one step). An
    invalid reply (no ANSWER lines, unknown question ids) costs a step; the budget is 2 steps,
    after which the session scores 0.

    ## Arguments
    `schedule` ("default": light, medium and heavy variants of 8 sessions; "light", "medium",
    "heavy": 12 sessions of one preset; "short": 3 light + 3 heavy sessions for tests), `cycle`,
    `render_mode` ("ansi"), `split` ("test", the benchmark's conversation; "train": another
    conversation from other conversation and question seeds, same presets; ids "train-session-NN"),
    `world_seed` (None: the canonical conversation; N: a fresh conversation, facts and questions
    drawn from seeds derived from the world, same presets and difficulty).

    ## Version History
    * v2: wrong answers score -1, abstentions 0 (v1: 0 for both, so guessing from the public value
      domains beat the stateless reference); the reference reads every phrasing and answers exact
      keys only; the header no longer names the variant; `world_seed` draws fresh conversations;
      outcomes carry verdict and error kind.
    * v1 (split kwarg, no change to the test split): `split="train"` for training.
    * v1: one chronology for every rollout (v0 permuted sessions within a variant by the rollout
      seed and replayed questions from the order played, so one session id asked different
      questions in different rollouts and gain paired unlike things); question ids are stable
      per session; `Q<i>` aliases.
      The terminal observation carries the score, the agent's answers and why each wrong one
      was hard (see Feedback); the brief states the one retry.
    * v0: initial release.
    """

    env_id = "clbench/MemoryProbe-v2"
    #: modules a scripted agent may import (text normalisation and the public sentence templates and value domains; no world's facts; tests/test_reference_imports.py)
    public_modules = ("text", "vocabulary")
    reward_unit = "recall accuracy 0-1"
    #: wall seconds of an instance (one question), roughly: the runner starts the dearest jobs first
    instance_seconds = 0.003
    suite = False  # a diagnostic of memory systems, not one of the six benchmark tasks
    reward_text = ("Per question +1 if right, -1 if wrong, 0 if left out or answered 'unknown'; the session's reward "
                   "is the sum divided by the number of questions (1.0 is perfect).")
    feedback_text = (
        "After the answer: the score, your answer to each question and whether it was right, and for wrong or "
        "missing ones why the fact was hard (sessions back, changed value, near-identical key, running total, "
        "said in passing). Correct values are never shown: the same key may be asked again later.")
    action_grammar = ("Answer every question in one reply, one line each: ANSWER <qid>: <value> "
                      '(or the tool call {"tool": "answer", "arguments": {"answers": {"<qid>": "<value>"}}}). '
                      "Leave out (or answer unknown) questions you cannot answer: a wrong answer costs a point.")
    max_invalid_repeats = 2
    #: fixed replies that ignore the session (clbench.agents.degenerate, tests/test_honest_scores.py);
    #: only `Q1` exists in every session
    degenerate_answers = {"zero": "ANSWER Q1: 0", "unknown": "ANSWER Q1: unknown", "yes": "ANSWER Q1: yes"}
    agents = {
        "truncation": "clbench.agents.memoryprobe:TruncationAgent",
        "sliding-summary": "clbench.agents.memoryprobe:SlidingSummaryAgent",
        "memory-bank": "clbench.agents.memoryprobe:MemoryBankAgent",
        "file-state": "clbench.agents.memoryprobe:FileStateAgent",
        "reference": "clbench.agents.memoryprobe:MemoryProbeReference",
        "oracle": "clbench.agents.memoryprobe:MemoryProbeOracle",
    }
    #: memoryless families the red team plays stateless (agents/memoryprobe_redteam.py): each reads the
    #: session in view and guesses the rest from a prior a memoryless agent has
    policy_families = {
        "domain-guess": ("clbench.agents.memoryprobe_redteam:DomainGuess", {"index": [0, "mid", -1]}),
        "same-kind-in-view": ("clbench.agents.memoryprobe_redteam:SameKindInView", {"fallback": ["abstain", "first"]}),
        "nearest-key-in-view": ("clbench.agents.memoryprobe_redteam:NearestKeyInView", {"threshold": [0.6, 0.8]}),
    }

    @classmethod
    def public_secrets(cls) -> list[str]:
        """The canonical conversation's fact keys and each `key: value` as a [FACT] line says it, and
        the people named as facts (values alone are mostly short numbers found anywhere)."""
        from clbench.envs.memoryprobe.generator import generate

        spec = load_task_spec(cls.task)
        conv = generate(spec, "default")
        mentions = [m for s in conv.sessions for m in s.mentions]
        people = {m.value for m in mentions if conv.keys[m.key].shape[0] == "person"}
        return sorted({*conv.keys, *(f"{m.key}: {m.value}" for m in mentions if m.op == "set"), *people})

    def __init__(self, schedule: str = "default", cycle: bool = False, render_mode: str | None = None,
                 split: str = "test", world_seed: int | None = None):
        super().__init__(schedule=schedule, cycle=cycle, render_mode=render_mode, split=split, world_seed=world_seed)
        self.total_tokens = self.conversation.total_tokens
        self.budget_tokens = int(self.spec_data["budget_fraction"] * self.total_tokens)
        self.brief = (
            "You are an assistant in one long conversation with a software team lead, split into sessions. "
            "Facts come up along the way: configuration values, decisions, measurements and who does what; "
            "some are pasted as '[FACT] key: value' lines, others said in passing; values change over time, "
            "some names are nearly identical, and some quantities are running totals. At the end of each "
            "session you are asked about facts from this and earlier sessions; answer with the current values. "
            "A right answer scores +1, a wrong one -1, a question left out or answered 'unknown' 0. "
            f"Memory budget: {self.budget_tokens} tokens (15% of the {self.total_tokens}-token conversation) "
            "for what you carry between sessions. A reply with no valid "
            "answer is rejected with the reason and you get one more try, after which the session scores 0.")
        self._question_cache: dict[tuple[str, ...], list[list[Question]]] = {}
        self._current: list[Question] = []

    def _build_schedule(self, name: str) -> Schedule:
        if name not in self.spec_data["schedules"]:
            raise ValueError(f"unknown schedule {name!r}; known: {sorted(self.spec_data['schedules'])}")
        if not self.canonical_world:  # train split, fresh worlds: the conversation and questions from other seeds
            spec = self.spec_data
            self.spec_data = {**spec, "seed": self.draw_seed(spec["seed"]),
                              "questions": {**spec["questions"], "seed": self.draw_seed(spec["questions"]["seed"])}}
        self.conversation = generate(self.spec_data, name)
        variants = []
        for v in self.spec_data["schedules"][name]:
            insts = tuple(Instance(s.instance_id, v["name"], s) for s in self.conversation.sessions
                          if s.variant == v["name"])
            variants.append(Variant(v["name"], insts, v.get("description", "")))
        return Chronology(name, variants)

    # ------------------------------------------------------------------ ground truth (runner/oracle only)
    def _questions_by_position(self) -> list[list[Question]]:
        if not self._order:
            raise RuntimeError("call reset(seed=...) first: questions are asked along the rollout's order")
        order = tuple(s.instance.payload.instance_id for s in self._order)  # session ids (no split prefix)
        if order not in self._question_cache:
            self._question_cache[order] = build_questions(self.conversation, list(order), self.spec_data["questions"])
        return self._question_cache[order]

    def questions(self, instance_id: str) -> list[Question]:
        """The questions asked at the end of `instance_id` in the current rollout."""
        return self._questions_by_position()[self._find(instance_id)]

    def instance_facts(self, instance_id: str) -> list[dict]:
        """The latent facts the questions of `instance_id` need (current rollout order), with their
        values and the mentions that state them. For the runner's probes; never shown to agents."""
        return [{**f, "text": f"{f['key']}: {f['value']}"} for f in (q.fact() for q in self.questions(instance_id))]

    def latent(self) -> AnswerKey:
        return AnswerKey(self)

    @classmethod
    def score_parts(cls, details: dict | None) -> dict[str, tuple[float, float]]:
        """Questions right of asked per kind of fact, so drift-check reports version chains (a value
        superseded later: old knowledge now wrong) and running totals apart from facts stated once."""
        parts = {part: [0, 0] for part in _PARTS.values()}
        for o in (details or {}).get("question_outcomes") or []:
            tally = parts[_PARTS.get(o["structure"], _PARTS["plain"])]
            tally[0] += bool(o["correct"])
            tally[1] += 1
        return {part: (float(right), float(asked)) for part, (right, asked) in parts.items()}

    # ------------------------------------------------------------------ hooks
    @property
    def tools(self) -> list[dict]:
        return [tool_schema(
            "answer", "Answer the session's recall questions: a map from question id to answer.",
            {"answers": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 500},
                         "maxProperties": 50}})]

    def _enter(self, slot: Slot, fresh: bool) -> str:
        session = slot.instance.payload
        self._current = self.questions(slot.instance_id)
        n = slot.position + 1
        lines = [
            f"MemoryProbe | session {n} of {len(self._order)}",
            f"Memory budget: {self.budget_tokens} tokens (15% of the {self.total_tokens}-token conversation) "
            "for what you carry between sessions; this session is always in view.",
            CONVERSATION_START.format(n=n), session.text, CONVERSATION_END.format(n=n),
            "Recall questions (about this and earlier sessions; give current values):",
        ]
        lines += [f"Q{i + 1} [{q.qid}] {q.text}" for i, q in enumerate(self._current)]
        lines.append(self.action_grammar)
        return "\n".join(lines)

    def _parse_text(self, text: str) -> ToolCall:
        found = _ANSWER_LINE.findall(text)
        if not found:
            raise ActionError(f"no ANSWER lines found. {self.action_grammar}")
        return ToolCall("answer", {"answers": {qid: value for qid, value in found}})

    def _act(self, call: ToolCall) -> Outcome:
        if call.tool != "answer":
            raise ActionError(f"unknown tool {call.tool!r}; use answer")
        answers = call.arguments.get("answers")
        if not isinstance(answers, dict):
            raise ActionError('"answers" must map question ids to answers')
        numbered = {f"Q{i + 1}": q.qid for i, q in enumerate(self._current)}
        answers = {numbered.get(k.upper(), k) if _ALIAS.match(k) else k: v for k, v in answers.items()}
        legal = {q.qid for q in self._current}
        unknown = sorted(set(answers) - legal)
        if unknown:
            raise ActionError(f"unknown question ids {unknown[:5]}; this session's ids: {', '.join(sorted(legal))}")
        results = [(q, values_match(q.answer, str(answers.get(q.qid, "")))) for q in self._current]
        verdicts = [self._verdict(q, ok, str(answers.get(q.qid, ""))) for q, ok in results]
        right = sum(ok for _, ok in results)
        wrong = sum(v == "wrong" for v, _ in verdicts)
        n = len(results)
        score = (right - WRONG_COST * wrong) / n if n else 1.0
        accuracy = right / n if n else 1.0
        return Outcome(self._feedback(score, results, answers), done=True, reward=score,
                       raw_metric=("recall_accuracy", accuracy), solved=right == n,
                       extra={"details": {"question_outcomes": [q.outcome(ok, v, e) for (q, ok), (v, e)
                                                                in zip(results, verdicts)]}})

    def _verdict(self, q: Question, ok: bool, given: str) -> tuple[str, str]:
        """(right|wrong|abstained, error kind of a wrong answer: superseded|other-key|unstated)."""
        if ok:
            return "right", ""
        if normalize_value(given).replace("'", "") in ABSTAIN:
            return "abstained", ""
        if any(values_match(v, given) for v in q.earlier):
            return "wrong", "superseded"
        if any(values_match(v, given) for v in self._stated()):
            return "wrong", "other-key"
        return "wrong", "unstated"

    def _stated(self) -> list[str]:
        """Every value stated in the conversation up to the current session (mentions' values)."""
        upto = self._order[:self._pos + 1]
        return list(dict.fromkeys(m.value for s in upto for m in s.instance.payload.mentions))

    def _feedback(self, score: float, results: list[tuple[Question, bool]], answers: dict) -> str:
        """Right or wrong per question and why a fact was hard; never the correct value (Feedback)."""
        lines = ["Per question (correct values are not shown: a key may be asked again later):"]
        for i, (q, ok) in enumerate(results):
            given = str(answers.get(q.qid, "")).strip()
            said = f'you answered "{given[:120]}"' if given else "not answered"
            if ok:
                lines.append(f"  Q{i + 1} [{q.qid}] right: {said}")
                continue
            why = [f"it goes back {q.age_sessions} session(s)" if q.age_sessions else "it came up in this session",
                   _HARD[q.structure]]
            if q.kind == "implicit":
                why.append("it was said in passing, not as a [FACT] line")
            lines.append(f"  Q{i + 1} [{q.qid}] wrong: {said}; {'; '.join(w for w in why if w)}")
        right = sum(ok for _, ok in results)
        return score_report(score, "fraction of recall questions answered correctly",
                            [("answered correctly", f"{right} of {len(results)}")], lines)


#: what a wrong answer costs (a right one earns 1): guessing from the public value domains loses
WRONG_COST = 1.0
#: answers that abstain (normalised: lower case, no spaces or final punctuation)
ABSTAIN = {"", "unknown", "n/a", "na", "none", "idk", "idontknow", "dontknow", "notsure", "noidea"}
#: why a wrong answer's fact was hard, by its structure
_HARD = {"plain": "", "chain": "its value changed after it was first stated; the current value is asked",
         "confusable": "a nearly identical key exists", "accumulator": "it is a running total (a total plus later increments)",
         "multi-hop": "its value is another key's current value: both facts are needed"}
#: score parts for drift-check, by a question's structure
_PARTS = {"chain": "superseded values (version chains)", "accumulator": "running totals",
          "multi-hop": "two facts combined (multi-hop)",
          "plain": "stated once (plain, confusable)", "confusable": "stated once (plain, confusable)"}
