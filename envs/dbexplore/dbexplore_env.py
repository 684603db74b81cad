"""DBExplore-v3: answer questions about an unfamiliar, obfuscated DuckDB database with SQL."""
from __future__ import annotations

import calendar
import os
import re

from clbench.actions import ActionError, ToolCall, parse_prefixed, tool_schema
from clbench.env import InstanceSequenceEnv, Outcome
from clbench.feedback import score_report
from clbench.schedule import Instance, Schedule, Slot, Variant
from clbench.sqlguard import run_query
from clbench.envs.dbexplore import world as worlds
from clbench.envs.dbexplore.cache import database_paths
from clbench.envs.dbexplore.connections import close_connection, open_connection
from clbench.envs.dbexplore.questions import Question, load_questions, question_facts, world_questions

_COMMANDS = {"QUERY": ("query_sql", "sql"), "ANSWER": ("answer", "value")}
_COMMAND_LINE = re.compile(r"^[ \t]*(?:QUERY|ANSWER)\b", re.IGNORECASE | re.MULTILINE)
SLOW = bool(os.environ.get("CLBENCH_SLOW"))
_FENCED = re.compile(r"^```[a-zA-Z]*\s*(.*?)\s*```$", re.DOTALL)
#: true answers computed in this process, by (database file, world, release, question id, text): the
#: env's own memory (never the agent's: no query reaches it), shared by every env object in the
#: process (the sub-envs of a vector), so each answer's SQL runs once per process
_TRUTHS: dict[tuple, object] = {}
#: the observations that start a question, by everything they are made of, shared by the env objects
#: of a process (a vector's sub-envs): the same question at the same place reads the same every time
_ENTRIES: dict[tuple, str] = {}


class DBExploreEnv(InstanceSequenceEnv):
    """
    ## Description
    An analyst answers 40 questions about an unfamiliar product-review database (DuckDB,
    read-only) by issuing SQL. Three product groups (office products, electronics, musical
    instruments; ~50k products each at scale 1.0 with power-law review counts) keep their items,
    reviews and, for some groups, a category tree and key/value attributes in tables with
    abbreviated names; table comments say each table's role and group, nothing more. The groups
    follow different conventions the database does not document: prices are stored in different
    units in different groups, times and flags are encoded differently, categories are laid out
    differently, one group lacks a table another has, and item statistics are stale for part of
    the items. Every items and reviews table has a coded status column; a lookup table says what
    each code means, and soft-deleted rows (and the reviews of deleted items) are in no answer.
    Some questions ask about fiscal years, whose calendar each group keeps to itself and writes
    nowhere; each group reports its review intake per fiscal quarter, and only under the true
    calendar do the review dates line up with that report, so the calendar is found by testing
    start months against the data. No fixed guess of a calendar is right for every group.

    Some conventions can be read from the catalog, others only by testing hypotheses against the
    data (a fiscal calendar), and one cannot be read anywhere and shows only when an answer is
    checked (a unit whose scale the data does not reveal). A memoryless analyst needs at least the
    catalog and the answer query (0.8 per question at best) and guesses the unit; an analyst who
    remembers what earlier questions taught needs one query and knows the unit. These conventions
    are the latent structure. After question 20 the database is migrated (release 2); the
    post-migration questions say that a migration happened, not what changed.

    ## Action Space
    `Text`: `QUERY: <one read-only SQL statement>` or `ANSWER: <value>`, or the JSON tool calls
    `{"tool": "query_sql", "arguments": {"sql": ...}}` / `{"tool": "answer", "arguments": {"value": ...}}`.
    Only single SELECT-type statements run (SELECT, WITH, DESCRIBE, SHOW, SUMMARIZE, FROM); the
    connection has external access disabled and its configuration locked. Each query has a time
    limit (10 s) and its result is capped (50 rows, 4000 characters) with a note.

    ## Observation Space
    `Text` (printable ASCII): at the start of a question the brief (role, budget, grammar), the
    database release (with a migration notice after the migration), the question and its answer
    type; after each query its result or the verbatim SQL error and the queries left.

    ## Rewards
    A correct answer scores `0.8 ** max(0, queries - 1)` (the query computing the answer is free,
    so an analyst who knows the schema scores 1.0; every further query multiplies the reward by
    0.8, so rediscovering the schema hurts); a wrong answer, a 16th query or no answer scores 0.
    Every SQL statement sent counts as a query, including rejected and failing ones; unparseable
    replies, empty queries and answers of the wrong type do not. Integers must match exactly,
    floats within max(tolerance, 0.1% relative), text case- and space-insensitively.
    raw_metric = ("queries_used", n). r_max = 1.0 (oracle).

    ## Feedback
    The terminal observation states whether the answer was correct, the queries used, the
    formula and the reward. After an answer it also gives the expected answer of this question:
    an analyst whose number is checked learns the right number (and so whether its reading of
    the schema was right), and no later question asks for it. After the query budget runs out or
    after three invalid replies in a row it says so, without the expected answer (nothing was
    answered). With `cycle=True` the schedule repeats, and so would the answers it revealed.

    ## Episode End
    One episode is one question. It terminates on an answer, or with reward 0 on a 16th query or
    after 3 invalid actions in a row. Invalid actions (unparseable replies, empty queries, answers
    of the wrong type) do not use up the query budget. Every SQL statement sent counts, including
    rejected and failing ones.

    ## Arguments
    `schedule` ("default": 20 questions on release 1, then 20 on release 2), `scale` (database
    size, 1.0 = ~50k products per group; tests use ~0.02), `cache_dir` (where built database files
    are cached; default the user cache dir), `query_timeout` (seconds per query, default 10),
    `cycle`, `render_mode` ("ansi"), `split` ("test" or "train"), `world_seed` (None: the
    canonical world; N: a freshly drawn world). The train split and every `world_seed` draw their
    own world (names, units, encodings, codes, calendars, which group lacks what, the migration)
    and their own database, and ask the same kinds of question about it.

    ## Version History
    * v0: initial release.
    * v1: coded soft-delete status columns with a code lookup table, reward
      `0.8 ** (queries - 1)` instead of `1 - (queries - 1)/15`, all 40 answers distinct, the
      terminal observation states the expected answer and the formula, the brief states every
      scoring rule, floats graded within max(tolerance, 0.1%) instead of 1%, an `explorer` agent.
    * v2: conventions that one look cannot give (a price unit the data does not reveal, fiscal
      calendars, a silent unit and calendar change in the migration), new table names, fiscal-year
      questions, worlds (`world_seed`, train split), a reference that plays the best memoryless
      strategy (catalog, then one answer query) and learns from the feedback.
    * v3: every group's review intake per fiscal quarter (restated when the migration moves a
      calendar): a fiscal calendar is found by testing start months against the data, not guessed
      (in v2 a memoryless guess was right by luck wherever it hit a calendar); the reference tests
      all twelve in its answer query; true answers shared by every env of a process.
    """

    env_id = "clbench/DBExplore-v3"
    #: modules a scripted agent may import (the question grammar and its SQL compiler, applied to the schema an agent discovered; no world's conventions; tests/test_reference_imports.py)
    public_modules = ("logical",)
    reward_unit = "query-efficiency score 0-1"
    brief = (
        "You are a data analyst. Answer questions about an unfamiliar product-review database (DuckDB SQL, "
        "read-only) by querying it. Nothing about the schema is documented except what the database itself "
        "holds (catalog functions such as duckdb_tables() and duckdb_columns(), DESCRIBE, SUMMARIZE, sample "
        "rows). Tables, columns, units and value formats may differ between product groups, and not every "
        "convention is written down anywhere. Some rows are soft-deleted: a coded status column marks them and "
        "the database records what each code means; soft-deleted rows (and the reviews of a deleted product) are "
        "part of no answer. Dates in questions are UTC calendar dates; a fiscal year is the product group's own "
        "twelve-month fiscal year, named by the calendar year in which it ends. Questions come one at a time."
    )
    reward_text = ("correct answer: 0.8 ** max(0, queries - 1) (the query that computes the answer is free; each "
                   "further query multiplies the reward by 0.8); wrong answer, a 16th query or no answer: 0. Every "
                   "SQL statement sent counts as a query, including rejected and failing ones; an unparseable reply, "
                   "an empty query or an answer of the wrong type costs no query, but 3 such replies in a row end "
                   "the question with 0")
    feedback_text = ("when a question ends: correct or not, queries used, the formula and the reward; after an answer "
                     "also this question's expected answer (every question's answer is different, so it reveals "
                     "nothing about another question)")
    action_grammar = ("Reply with exactly one of: 'QUERY: <one SQL SELECT statement>' or 'ANSWER: <value>' "
                      "(or the JSON tool calls query_sql {\"sql\": ...} / answer {\"value\": ...}).")
    max_invalid_repeats = 3
    invalid_action_costs_step = False
    #: wall seconds of an instance (a question's DuckDB queries), roughly: the runner starts the dearest jobs first
    instance_seconds = 0.01
    #: fixed replies that ignore the observation (clbench.agents.degenerate, tests/test_honest_scores.py)
    degenerate_answers = {"zero": "ANSWER: 0", "one": "ANSWER: 1", "query": "QUERY: SELECT 1"}
    agents = {
        "reference": "clbench.agents.dbexplore:DBExploreReference",
        "oracle": "clbench.agents.dbexplore:DBExploreOracle",
    }
    #: memoryless families the red team searches (agents/dbexplore_redteam.py); the reference's own
    #: stateless play (catalog, one answer query, generic rules, fiscal calendars tested against the
    #: data) is the best point we know. A fixed fiscal-month guess instead of the test is right only for
    #: a group whose calendar it hits (never every group); CLBENCH_SLOW=1 tries every month
    policy_families = {
        "catalog_reader": ("clbench.agents.dbexplore_redteam:CatalogReader",
                           {"price_rule": ["whole_is_cents", "int_is_cents"] + (["as_stored"] if SLOW else []),
                            "fiscal_start": list(range(1, 13)) if SLOW else [2, 7]}),
        "explorer": ("clbench.agents.dbexplore_redteam:Explorer", {"price_rule": ["whole_is_cents"]}),
        "keyword_status": ("clbench.agents.dbexplore_redteam:KeywordStatus", {"keyword": ["delet", "remov"]}),
    }

    def __init__(self, schedule: str = "default", scale: float = 1.0, cache_dir: str | None = None,
                 query_timeout: float | None = None, cycle: bool = False, render_mode: str | None = None,
                 split: str = "test", world_seed: int | None = None):
        self.world: dict | None = None
        super().__init__(schedule=schedule, cycle=cycle, render_mode=render_mode, split=split,
                         world_seed=world_seed)
        self.scale = float(scale)
        if not 0 < self.scale <= 10:
            raise ValueError(f"scale must be in (0, 10], got {scale}")
        self.cache_dir = cache_dir
        spec = self.spec_data
        self.budget = self.max_steps - 1  # the queries; the last step is the answer
        self.query_timeout = float(query_timeout if query_timeout is not None else spec["query_timeout_s"])
        if not 0 < self.query_timeout < float("inf"):  # 0, negative, inf or NaN would break every query
            raise ValueError(f"query_timeout must be a finite number of seconds > 0, got {query_timeout!r}")
        self._paths: dict[int, str] | None = None
        self._cons: dict[int, tuple] = {}  # release -> (path, agent connection, answer connection)
        self._maps: dict | None = None
        self._question: Question | None = None
        self._release = 1
        self._queries = 0
        self._instances = len(self.schedule)
        self.discount = float(spec["query_discount"])

    # ------------------------------------------------------------------ world, schedule and ground truth
    def _draw_world(self) -> None:
        """The world's latent structure, questions and generator spec (canonical: as written)."""
        spec = self.spec_data
        if self.canonical_world:
            self.world, self.questions = worlds.canonical(spec), load_questions()
        else:
            self.world = worlds.draw(spec, self.world_rng)
            self.questions = world_questions(spec, self.world, self.world_rng("questions"))
        #: what the database files are built from: the spec with this world and its data seed
        self.build_spec = dict(spec, world=self.world, seed=self.draw_seed(spec["seed"]))

    def _build_schedule(self, name: str) -> Schedule:
        if self.world is None:
            self._draw_world()
        spec = self.spec_data["schedules"]
        if name not in spec:
            raise ValueError(f"unknown schedule {name!r}; known: {sorted(spec)}")
        variants = []
        for v in spec[name]:
            insts = []
            for qid in v["questions"]:
                q = self.questions[qid]
                if q.release != v["release"]:
                    raise ValueError(f"{qid} is a release-{q.release} question in release-{v['release']} variant")
                insts.append(Instance(qid, v["name"], q))
            variants.append(Variant(v["name"], tuple(insts), v.get("description", "")))
        return Schedule(name, variants)

    def latent(self) -> dict:
        """Group maps (see logical.py) of both releases: where each group keeps what, in what unit."""
        from clbench.envs.dbexplore.generator import schema_map  # pandas: only the oracle and builds need it
        from clbench.envs.dbexplore.migration import migrated_map

        first = schema_map(self.build_spec, self.world)
        return {"releases": {"1": first, "2": migrated_map(self.build_spec, self.world, first)}}

    @classmethod
    def public_secrets(cls) -> list[str]:
        """The canonical world's table names (intake reports included), lookup name, price units, codes'
        texts, fiscal calendars and the names the migration adds."""
        from clbench.env import load_task_spec

        world = load_task_spec("dbexplore")["world"]
        names = [worlds.table(world, role, g) for role in worlds.ROLES for g in worlds.GROUPS
                 if role in worlds.ALWAYS or world["groups"][g][role]]
        rates = [f"{float(world['groups'][g]['price']['rate']):g}" for g in worlds.GROUPS
                 if world["groups"][g]["price"]["unit"] == "foreign"]
        rates.append(f"{float(world['migration']['redenominate']['rate']):g}")
        descr = [c[3] for s in world["status"].values() for c in s["codes"] if " " in c[3]]
        starts = [world["groups"][g]["fiscal_start"] for g in worlds.GROUPS] + [world["migration"]["fiscal"]["start"]]
        fiscal = [f"starts in {calendar.month_name[m]}" for m in starts] + [f"fiscal_start: {m}" for m in starts]
        migration = ["prc_cur", "vrf_st", "attr_nm", "attr_val", f"itm_{worlds.table(world, 'attributes', 'g3')}"]
        return sorted(set(names + [world["lookup"]] + rates + descr + fiscal + migration))

    def instance_facts(self, instance_id: str) -> list[dict]:
        """Latent facts the question depends on (from the true group maps); for the runner only.
        A memory names a fact by the tables it is about."""
        qid = instance_id.removeprefix(f"{self.split}-") if self.split != "test" else instance_id
        if qid not in self.questions:
            raise KeyError(f"unknown instance id {instance_id!r}")
        q = self.questions[qid]
        maps = self.latent()["releases"][str(q.release)]
        return [{"key": key, "text": text, "mentions": [{"text": w} for w in sorted(set(names))]}
                for key, text, names in question_facts(q, maps)]

    @property
    def tools(self) -> list[dict]:
        return [
            tool_schema("query_sql", "Run one read-only SQL query (uses one query of the budget).",
                        {"sql": {"type": "string", "minLength": 1}}),
            tool_schema("answer", "Submit the final answer to the question (ends the question).",
                        {"value": {"type": ["string", "number"]}}),
        ]

    # ------------------------------------------------------------------ database access
    def database_paths(self) -> dict[int, str]:
        """Both releases' database files (built and cached on first use)."""
        if self._paths is None:
            self._paths = {r: str(p) for r, p in database_paths(self.build_spec, self.scale, self.cache_dir).items()}
        return self._paths

    def _connections(self, release: int) -> tuple:
        if release not in self._cons:
            path = self.database_paths()[release]
            self._cons[release] = (path, open_connection(path), open_connection(path))
        return self._cons[release]

    def _truth(self, q: Question):
        path, _, truth_con = self._connections(q.release)
        key = (path, self.world_key, q.release, q.qid, q.text)
        if key not in _TRUTHS:  # sub-envs of a vector share a process: each answer is computed once
            if self._maps is None:
                self._maps = self.latent()["releases"]
            _TRUTHS[key] = q.answer(truth_con, self._maps[str(q.release)])
        return _TRUTHS[key]

    def close(self):
        for path, agent_con, answer_con in self._cons.values():
            close_connection(path, agent_con)
            close_connection(path, answer_con)
        self._cons.clear()
        super().close()

    # ------------------------------------------------------------------ hooks
    def _enter(self, slot: Slot, fresh: bool) -> str:
        # The agent can write nothing (read-only SQL), so `fresh` needs no wiping here.
        q: Question = slot.instance.payload
        self._question, self._release, self._queries = q, q.release, 0
        self._connections(q.release)  # the true answer is computed when an answer is graded, not here
        key = (type(self), self.budget, self.discount, slot.position, self._instances, q.text, q.answer_type,
               q.tolerance)
        text = _ENTRIES.get(key)
        if text is None:
            if len(_ENTRIES) >= 4096:  # many worlds and rollout seeds in one process
                _ENTRIES.clear()
            text = _ENTRIES[key] = self._entry_text(slot, q)
        return text

    def _entry_text(self, slot: Slot, q: Question) -> str:
        lines = [
            self.brief,
            f"Budget: {self.budget} queries for this question. Reward if your answer is correct: "
            f"{self.discount:g} ** max(0, queries - 1) (the query that computes the answer is free; each further "
            f"query multiplies the reward by {self.discount:g}); a wrong answer, a query beyond the budget or no "
            f"answer scores 0. Every SQL statement sent counts as a query, including rejected and failing ones; an "
            f"unparseable reply, an empty query or an answer of the wrong type costs no query, but "
            f"{self.max_invalid_repeats} such replies in a row end the question with 0.",
            self.action_grammar,
        ]
        lines += [f"Question {slot.position + 1} of {self._instances}: {q.text}",
                  f"Answer type: {q.describe_type()}"]
        return "\n".join(lines)

    def _parse_text(self, text: str) -> ToolCall:
        call = parse_prefixed(text, _COMMANDS)
        if call is None:
            m = _COMMAND_LINE.search(text)  # prose first, then the command on its own line
            call = parse_prefixed(text[m.start():], _COMMANDS) if m else None
        if call is None:
            raise ActionError(f"could not parse the reply. {self.action_grammar}")
        return call

    def _act(self, call: ToolCall) -> Outcome:
        if call.tool == "query_sql":
            return self._query(call.arguments.get("sql"))
        if call.tool == "answer":
            return self._answer(call.arguments.get("value"))
        raise ActionError(f"unknown tool {call.tool!r}; use query_sql or answer")

    def _query(self, sql) -> Outcome:
        if not isinstance(sql, str):
            raise ActionError("the query must be a string of SQL")
        sql = sql.strip()
        fenced = _FENCED.match(sql)
        if fenced:
            sql = fenced.group(1).strip()
        if not sql:
            raise ActionError(f"empty query. {self.action_grammar}")
        if self._queries >= self.budget:
            return Outcome(f"Query budget of {self.budget} exceeded (query {self._queries + 1} sent); the question "
                           "scores 0. Reward: 0.", done=True, reward=0.0,
                           raw_metric=("queries_used", self._queries + 1), solved=False)
        self._queries += 1
        spec = self.spec_data
        try:
            text = run_query(self._connections(self._release)[1], sql, timeout=self.query_timeout,
                             max_rows=int(spec["result_max_rows"]), max_chars=int(spec["result_max_chars"])).text
        except Exception as exc:  # e.g. a value Python cannot represent: agent SQL must never crash step()
            text = f"Error: {type(exc).__name__}: {exc}"
        left = self.budget - self._queries
        return Outcome(f"{text}\n[query {self._queries} of {self.budget} used; {left} left]")

    def _answer(self, value) -> Outcome:
        q = self._question
        if value is None or isinstance(value, bool):
            raise ActionError(f"the answer must be a {q.answer_type} value")
        try:
            given = q.parse(value)
        except ValueError as exc:
            raise ActionError(f"{exc}. Answer type: {q.describe_type()}") from None
        truth = self._truth(q)
        correct = q.is_correct(given, truth)
        reward = self.discount ** max(0, self._queries - 1) if correct else 0.0
        if correct:
            score = f"{self.discount:g} ** max(0, {self._queries} - 1) = {reward:.4f}"
        else:
            score = "0 (a wrong answer scores 0)"
        expected = f"{truth:.6g}" if isinstance(truth, float) else str(truth)
        verdict = (f"Your answer {given!r} is {'correct' if correct else 'incorrect'}; the expected answer was "
                   f"{expected} ({q.describe_type()}).")
        return Outcome(verdict + "\n" + self._score(reward, score), done=True, reward=reward,
                       raw_metric=("queries_used", self._queries), solved=correct)

    def _score(self, reward: float, formula: str) -> str:
        return score_report(reward, f"{self.discount:g} ** (queries - 1) if the answer is correct, else 0", [
            ("queries used", f"{self._queries} of {self.budget}"), ("reward", formula)])

    def _on_invalid_cap(self) -> Outcome:
        return Outcome(f"Too many invalid actions in a row ({self.max_invalid_repeats}); the question scores 0.\n"
                       + self._score(0.0, "0 (no answer)"),
                       done=True, reward=0.0, raw_metric=("queries_used", self._queries), solved=False)
