"""CohortStudies-v4: survival estimation across heterogeneous studies."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import platformdirs

from clbench.actions import ActionError, ToolCall, extract_json, tool_schema, validate_call
from clbench.env import InstanceSequenceEnv, Outcome, load_task_spec
from clbench.envs.cohortstudies import views, worlds
from clbench.envs.cohortstudies.codings import quote_ident, sql_literal
from clbench.envs.cohortstudies.km import km_at
from clbench.envs.cohortstudies.population import Population
from clbench.envs.cohortstudies.scoring import binary_kl_bits, information_gain_bits
from clbench.feedback import score_report
from clbench.schedule import Instance, Schedule, Slot, Variant
from clbench.sqlguard import QueryRejected, connect_readonly, readonly_statement, run_query, time_limit

if TYPE_CHECKING:  # studies imports pandas, which only building a study needs
    from clbench.envs.cohortstudies.studies import StudyData

QUERY_TIMEOUT_S = 10.0
#: worlds drawn in this process, by (env id, world key): read-only, shared by every env of that world
_DRAWN: dict[tuple[str, str], dict] = {}


@dataclass
class Built:
    """One study instance as built in the env's temp dir."""

    data: StudyData
    path: Path
    baseline: np.ndarray  # overall sample KM at the time points (the flat baseline)
    truth: np.ndarray  # (cohorts, time points) population survival of the region


class ExpressionRejected(ValueError):
    """A group expression that is not a single scalar SQL expression over the patients table."""


@functools.lru_cache(maxsize=4096)  # a text always gets the same verdict; parsing cost ~2 ms a call
def check_expression(expr: str) -> str:
    """Validate a group expression with DuckDB's parser; return its normalised text."""
    if not expr.strip():
        raise ExpressionRejected("empty expression")
    try:
        parsed = str(duckdb.SQLExpression(expr))
    except duckdb.Error as exc:
        raise ExpressionRejected(f"not a single SQL expression ({str(exc).splitlines()[0]})") from None
    bare = re.sub(r"'(?:[^']|'')*'", "''", parsed)
    if re.search(r"\bselect\b", bare, re.IGNORECASE):
        raise ExpressionRejected("subqueries are not allowed; use columns of the patients table")
    return parsed


class CohortStudiesEnv(InstanceSequenceEnv):
    """
    ## Description
    An epidemiologist studies a fictional disease. Each instance is one study of one region:
    after exploring the study's patients table (a read-only DuckDB database), the agent
    publishes survival at 12, 24 and 36 months for 36 predefined cohorts defined on standard
    variables (single variables, pairs, triples), including cohorts the study cannot observe.
    Latent structure: a few patient types with Weibull survival drive survival in every study;
    regions differ in their type mix; covariates depend on the type. Five studies (HERALD,
    MERIDIAN, MOSAIC, FORGE, CADENCE; one variant each, 4 regions each, 20 instances) enroll
    biased samples, measure partly overlapping variables, name and code them their own way
    (score scales, categorical vs numeric biomarkers, genotype codings, units) and carry
    distractor columns. Column descriptions (with a `[standard: ...]` tag) are the only bridge
    between studies; an agent that pools what earlier studies showed can report cohorts the
    current study cannot observe, and correct one study's enrollment bias with the others'.

    Concept drift: from one study on, a consortium column shared with an earlier study is re-coded
    (the new coding documented in that study's tag); a later study uses the column without a tag,
    coded as the data dictionary then says. A mapping learned before the re-coding selects the
    wrong patients from then on. Which column, how it is re-coded and the populations are latent:
    the canonical world's are in tasks/cohortstudies/default.yaml, every other world draws its own.

    ## Action Space
    `Text`: a JSON tool call `{"tool": name, "arguments": {...}}` or the text grammar
    `TOOL_NAME: {json arguments}` (also `query_sql: SELECT ...`,
    `estimate_survival_by_group: <expression>`, or a bare tool name for tools without
    arguments). Tools: `get_database_metadata`, `get_data_summary`, `query_sql` (one read-only
    SELECT, hardened DuckDB, 10 s, 50 rows), `estimate_survival_by_group` (lifelines
    Kaplan-Meier at 12/24/36 months for the groups of one SQL expression, typically a CASE;
    `group_expressions` takes up to 12 at once), `submit_cohort_report` (`{"survival":
    {"C01": [S12, S24, S36], ..., "C36": [...]}}`, 108 probabilities in [0, 1]).

    ## Observation Space
    `Text` (printable ASCII): the instance brief (standard variables, cohorts, tools), then each
    tool's output or an error saying what was wrong; after the report, its score and feedback.

    ## Feedback
    The terminal observation states the score and its two parts: the mean KL of the baseline and of
    the report against the truth, in bits, over all cohorts and time points. Nothing per cohort:
    the 36 cohorts recur in every study and every region recurs across studies, so per-cohort
    errors or directions would let an agent tune a fixed table to the feedback without analysing
    any data (such a table reached 84% of r_max under v1's per-cohort feedback), and true values
    would answer later instances outright. The score alone still ranks tables: a data-blind search
    that replays the same 20 instances over and over, keeping the moves that lower the stated KL
    (agents/cohortstudies_redteam.py FeedbackSearch), passes r_reference on the 10th pass of the
    canonical world (0.0245 against 0.0197); it has learned that world's answers, not the skill, which
    fresh worlds expose: the table it learned there scored -0.057 on average on v3's worlds 1-20 (every
    one below 0, the flat baseline), and the one it learns on world N's train split stays below world N's
    r_reference (tests/test_cohortstudies.py). A table read off the generator itself (each cohort's mean
    offset from its region's overall survival over train worlds) earned +0.0034 +- 0.0015 bits over the
    regions' overall survival on v3's fresh worlds 1-30 (above 0 in 23), as v3 fixed which way the
    re-coded variable's standout profile moves survival; since v4 it earns +0.0005 +- 0.0011 (15 of 30),
    and added to the stateless reference it does not lead it (tests/test_cohortstudies_prior.py).

    ## Rewards
    Information gain in bits over the flat baseline that reports the study's overall Kaplan-Meier
    survival for every cohort: mean binary KL(true || baseline) - mean KL(true || report) over
    36 cohorts x 3 time points, all probabilities clipped to [0.001, 0.999]. "True" is the exact
    population survival of the cohort in the study's region under the latent Weibull mixture.
    0 on every other step. raw_metric = ("information_gain_bits", value).
    r_max is the oracle's (true survival) mean; r_reference the stateless reference's mean.

    ## Episode End
    Terminates when a valid report is submitted (a report is final). 20 tool calls per instance,
    the report included; invalid calls (unknown tool, bad arguments, malformed report) cost a
    call and 3 in a row end the instance; running out of calls truncates it. Without a report
    the instance scores 0 (the same as reporting the baseline).

    ## Arguments
    `schedule` ("default": 5 studies x 4 regions; "short": 1 instance per study), `cycle`,
    `render_mode` ("ansi"), `cache_dir` (where study databases are cached; default
    `platformdirs.user_cache_dir("clbench")/cohortstudies`, keyed by generator version, seed and a hash
    of the world's spec; files are written to a temp name and renamed, so parallel workers can share it),
    `split` ("test", the benchmark; "train": the same studies and kinds of structure in another world:
    its own populations, effects, region names and mixes, enrollment biases, codes and re-coding, every
    table from other seeds, drawn against the test world it trains for so that its answers earn at most
    a fifth of r_max there; ids "train-<STUDY>-<k>"), `world_seed` (None: the canonical world; N: a
    fresh world of the same kind and difficulty drawn from N, whose answers are not the canonical
    world's or its train split's, see clbench.envs.cohortstudies.worlds). Every drawn world (train
    split or `world_seed`) is held to the canonical world's difficulty in three ways, each a ratio of
    the canonical world's value: the gain of the truth over the regions' overall survival (within
    1.3x), and, as an analytic model of the reference judges the draw
    (clbench.envs.cohortstudies.analyst), the stateless reference's share of r_max (within 1.15x),
    the drift cost's share of the headroom r_max - r_reference (within 1.25x) and the stateful
    reference's normalized gain (within 1.3x). Played, the reference's share of r_max then stays
    within 1.3x of the canonical world's, and the drift share and the normalized gain within
    clbench.commands.worlds.BAND (tests/test_cohortstudies.py, tests/test_worlds.py). A drawn world
    is kept in `cache_dir`/worlds (keyed by the spec and the drawing code), so workers do not redraw it.

    ## Version History
    * v4 (the canonical world, its data and its r_max / r_reference unchanged): in drawn worlds the profile
      that stands out on the re-coded variable goes to one of the two longest-lived or one of the two
      shortest-lived types, even odds drawn once per world (v3: always a short-lived one, so cohorts on
      that variable lay below their region's survival in 73-83% of worlds). A memoryless policy that adds
      the generator's mean answers (over train worlds 1-30) to the stateless reference's partial cohorts
      led it on v3's fresh worlds 1-30 by +0.0013 +- 0.0006 bits (23 of 30; x0.75) and, at the point surest
      on the train worlds, +0.0007 +- 0.0001 (24 of 30); on v4's, -0.0003 +- 0.0004 (13 of 30) and
      +0.00003 +- 0.00004 (16 of 30), analytic model of the reference. The drift keeps its weight (its
      modelled share of the headroom on worlds 1-30: 0.38 [0.31, 0.48], v3 0.39 [0.32, 0.49], canonical
      0.39). Open: the re-coding is the same kind of map in every drawn world, so a memoryless read of the
      untagged column as that kind leads the stateless reference (tests/test_cohortstudies_prior.py, a
      strict xfail).
    * v3, drawn worlds held to the reference's difficulty (the canonical world unchanged): a draw is
      taken only when the analytic model of the reference puts its share of r_max, the drift's share
      of the headroom and its normalized gain near the canonical world's (the re-coding's scale is
      tried in a drawn order until they fit); drawn worlds are kept in the cache folder. Before, worlds 1-20 put the reference at 0.22-0.55 of r_max (canonical
      0.52) and the drift cost outside the drift band in 12 of 20. On worlds 1-20
      (canonical in brackets): r_max 0.042 [0.027, 0.055] (0.038), r_reference 0.022 [0.013, 0.035]
      (0.020), its share of r_max 0.53 [0.46, 0.63] (0.52), normalized gain 0.42 [0.30, 0.51] (0.40),
      drift cost 0.0069 [0.0042, 0.0102] (0.0062), its share of the headroom 0.36 [0.26, 0.45]
      (0.34); the best red-team policy 0.41 of r_reference on average, at most 0.85 (0.43); train
      answers below 0 in every world, no instance with its train twin's truth.
    * v3 (the canonical world, its data and its r_max / r_reference unchanged): drawn worlds (the
      train split, `world_seed`) permute each standard variable's per-type distributions on their own
      (which variables predict survival, and in which direction, differ between worlds), are held to
      the canonical world's difficulty, and give no published world's answers; a train world is drawn
      against its test world. v2's fresh worlds were alike enough that the train split's answers
      reached r_reference in 9 of 20 of them, and their r_reference ranged 0.012-0.105. On worlds 1-20:
      r_max 0.036 [0.022, 0.045], r_reference 0.013 [0.005, 0.024], the reference's normalized gain
      0.46 [0.25, 0.61] (canonical 0.038, 0.020, 0.40); the train answers score below 0 in every world.
    * v2: the train split and fresh worlds (`world_seed`) draw every latent value (v1's train split
      shared the test split's population, so its answers were the test answers); the feedback gives
      only the score and its aggregate parts (v1's per-cohort too high / too low and grade let a
      data-blind agent learn the answers); the reference analyses a single study fully (each
      condition's effect, partial cohorts from their observable conditions); text actions are
      checked against the tool schemas (`QUERY_SQL:` alone raised KeyError); recalibrated.
    * v1 (split kwarg, no change to the test split): `split="train"` for training.
    * v1: a shared consortium column re-coded by a later study: real concept drift; r_max and
      r_reference recalibrated. The terminal observation carries the score, its parts and
      per-cohort feedback; the brief states the call budget, what invalid calls cost and that no
      report scores 0.
    * v0: initial release.
    """

    env_id = "clbench/CohortStudies-v4"
    #: modules a scripted agent may import (parsers of the condition and tag notation the observations use; no world's codings; tests/test_reference_imports.py)
    public_modules = ("codings",)
    reward_unit = "bits"
    brief = (
        "You are an epidemiologist studying a fictional chronic disease. Each instance gives you one study's "
        "patients table (DuckDB, read-only). Report, for each of 36 predefined cohorts defined on standard "
        "variables, the survival probability at 12, 24 and 36 months in the study's region's population - "
        "including cohorts this study cannot observe. Studies sample their populations with biases, measure "
        "different variables and name and code them differently; a column description may end with a "
        "[standard: ...] tag stating how the column relates to a standard variable; a column without one is coded "
        "as the consortium's data dictionary says, which is the last tag given for a column of that name. The same kinds of patients appear in every study. You have 20 tool calls per "
        "instance, the report included; the report is final and ends the instance. An invalid call (unknown "
        "tool, bad arguments, malformed report) costs a call and three in a row end the instance; an instance "
        "that ends without a report scores 0 (as reporting the baseline would)."
    )
    reward_text = (
        "Information gain in bits over the flat baseline that reports the study's overall Kaplan-Meier survival "
        "for every cohort: mean binary KL(true || baseline) - mean KL(true || report) over 36 cohorts x 3 time "
        "points, probabilities clipped to [0.001, 0.999]. True = population survival of the cohort in the region."
    )
    feedback_text = (
        "After the report: the score and its two parts, the mean KL of the baseline and of your report against "
        "the truth (bits), over all cohorts and time points. Nothing per cohort: cohorts recur in every study, so "
        "per-cohort errors or directions would let later reports be tuned to the feedback instead of the data.")
    action_grammar = (
        'Call a tool with JSON {"tool": "query_sql", "arguments": {"sql": "SELECT ..."}} or as text '
        "`TOOL_NAME: {json arguments}` (e.g. `get_database_metadata`, `query_sql: SELECT count(*) FROM patients`, "
        "`estimate_survival_by_group: CASE WHEN age_yrs >= 75 THEN 'old' ELSE 'young' END`). Finish with "
        'submit_cohort_report {"survival": {"C01": [S12, S24, S36], ..., "C36": [S12, S24, S36]}}.'
    )
    invalid_action_costs_step = True
    max_invalid_repeats = 3
    #: wall seconds of an instance (DuckDB queries and survival fits), roughly: the runner starts the dearest jobs first
    instance_seconds = 0.04
    #: fixed replies that ignore the observation (clbench.agents.degenerate, tests/test_honest_scores.py)
    degenerate_answers = {
        name: json.dumps({"tool": "submit_cohort_report",
                          "arguments": {"survival": {f"C{i:02d}": curve for i in range(1, 37)}}})
        for name, curve in (("high", [0.95, 0.9, 0.85]), ("mid", [0.8, 0.6, 0.4]))}
    agents = {
        "reference": "clbench.agents.cohortstudies:CohortReference",
        "oracle": "clbench.agents.cohortstudies:CohortOracle",
    }
    #: memoryless red-team families (clbench redteam): data-blind tables and the bare overall KM, shifted
    policy_families = {
        "fixed_table": ("clbench.agents.cohortstudies_redteam:FixedTable",
                        {"source": ["constant"], "curve": [[0.87, 0.73, 0.58], [0.9, 0.8, 0.7], [0.8, 0.64, 0.51],
                                                           [0.93, 0.85, 0.77]]}),
        "train_answers": ("clbench.agents.cohortstudies_redteam:FixedTable", {"source": ["train-truth"]}),
        "baseline_shift": ("clbench.agents.cohortstudies_redteam:BaselineShift", {"shift": [-0.3, -0.1, 0.1, 0.3]}),
    }

    def __init__(self, schedule: str = "default", cycle: bool = False, render_mode: str | None = None,
                 cache_dir: str | None = None, split: str = "test", world_seed: int | None = None):
        spec = load_task_spec(self.task)
        self.points = [int(p) for p in spec["time_points_months"]]
        self.eps = float(spec["smoothing_eps"])
        self.max_expressions = int(spec["max_expressions_per_call"])
        self.max_groups = int(spec["max_groups_per_expression"])
        self.cohort_texts = dict(spec["cohorts"])
        # Study tables are regenerated in memory (cheap, deterministic; the env needs them for the
        # baseline and summaries); only the DuckDB files are cached, at a path that depends on
        # nothing but the world's spec, so even the path an agent can see through SQL is reproducible.
        self.cache_dir = Path(cache_dir) if cache_dir else Path(platformdirs.user_cache_dir("clbench")) / self.task
        self._built: dict[str, Built] = {}
        self._con: duckdb.DuckDBPyConnection | None = None
        super().__init__(schedule=schedule, cycle=cycle, render_mode=render_mode, split=split, world_seed=world_seed)

    # ------------------------------------------------------------------ the world
    @functools.cached_property
    def world(self) -> dict:
        """This world's population and studies: as written (canonical) or drawn (train, world seeds)."""
        if self.canonical_world:
            return worlds.canonical(self.spec_data)
        key = (self.env_id, self.world_key)
        if key not in _DRAWN:  # a draw judges many candidates (seconds); the same key always draws the same world
            _DRAWN[key] = self._stored_world()
        return _DRAWN[key]

    def _stored_world(self) -> dict:
        """The drawn world, from the cache folder when this spec and this drawing code drew it before
        (worker processes of one run would each spend seconds drawing it again); plain data written
        with repr and read with ast.literal_eval (nothing executable), via a temp file renamed into place."""
        import ast

        from clbench.calibration import world_fingerprint  # the spec, this package and the reference's module

        path = self.cache_dir / "worlds" / f"{self.world_key}-{world_fingerprint(self)}.txt"
        try:
            return ast.literal_eval(path.read_text())
        except (OSError, ValueError, SyntaxError):
            pass
        world = worlds.draw_world(self.spec_data, self.world_rng, avoid=tuple(w.world for w in self._avoided_worlds()))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(repr(world))
        os.replace(tmp, path)
        return world

    def _avoided_worlds(self) -> list["CohortStudiesEnv"]:
        """The worlds whose answers this drawn world's must not give: the published ones (the canonical
        world, and its train split for fresh worlds) and, for a train world, the test world it trains for."""
        make = functools.partial(type(self), cache_dir=str(self.cache_dir))
        if self.split == "test":
            return [make(), make(split="train")]
        return [make()] if self.world_seed is None else [make(world_seed=self.world_seed), make()]

    @functools.cached_property
    def population(self) -> Population:
        return Population(self.world["population"])

    @functools.cached_property
    def cohorts(self) -> dict:
        return {cid: self.population.conditions(text) for cid, text in self.cohort_texts.items()}

    @functools.cached_property
    def studies(self) -> dict:
        from clbench.envs.cohortstudies.studies import Study  # pandas: only building a study needs it

        return {s["name"]: Study(s, self.population) for s in self.world["studies"]}

    @classmethod
    def public_secrets(cls) -> list[str]:
        """The canonical world's latent values as they would be written: region names, patient types, the
        shared column that is re-coded and its re-coding, and the distinctive generator numbers."""
        spec = load_task_spec(cls.task)
        pop = spec["population"]
        secrets = list(pop["regions"]) + list(pop["types"][1:3])  # "stable"/"aggressive" are everyday words
        shared = worlds._shared_name(spec["studies"])
        offsets = {c["coding"]["numeric"]["offset"] for s in spec["studies"] for c in s["columns"]
                   if c["name"] == shared and "offset" in c["coding"].get("numeric", {})}
        secrets += [shared] + [f"{k:g} - {word}" for k in offsets for word in ("value", "score")]
        return secrets

    # ------------------------------------------------------------------ schedule and instances
    def _build_schedule(self, name: str) -> Schedule:
        schedules = self.spec_data["schedules"]
        if name not in schedules:
            raise ValueError(f"unknown schedule {name!r}; known: {sorted(schedules)}")
        per_study = int(schedules[name]["instances_per_study"])
        variants = []
        for s in self.world["studies"]:
            # train: each table from another seed (the payload's seed also keys the database cache)
            insts = tuple(Instance(f"{s['name']}-{i + 1}", s["name"],
                                   {"study": s["name"], **inst, "seed": self.split_seed(inst["seed"])})
                          for i, inst in enumerate(s["instances"][:per_study]))
            variants.append(Variant(s["name"], insts, s["title"]))
        return Schedule(name, variants)

    def _truth(self, region: str) -> np.ndarray:
        return np.array([self.population.cohort_survival(region, conds, self.points) for conds in self.cohorts.values()])

    def build(self, instance: Instance) -> Built:
        """Build (once per env) the study database of an instance."""
        if instance.instance_id not in self._built:
            p = instance.payload
            data = self.studies[p["study"]].build(p["region"], int(p["seed"]))
            path = self.database_path(instance)
            if not path.exists():
                from clbench.envs.cohortstudies.studies import write_database

                path.parent.mkdir(parents=True, exist_ok=True)
                write_database(data.table, path)  # temp file + atomic rename: safe for parallel workers
            baseline = np.array(km_at(data.months, data.events, self.points), dtype=float)
            self._built[instance.instance_id] = Built(data, path, baseline, self._truth(p["region"]))
        return self._built[instance.instance_id]

    def database_path(self, instance: Instance) -> Path:
        """Cache path keyed by generator version, seed and a hash of everything the table depends on."""
        p = instance.payload
        study = next(s for s in self.world["studies"] if s["name"] == p["study"])
        content = json.dumps({"population": self.world["population"], "study": study, "instance": p},
                             sort_keys=True, default=str)
        key = hashlib.sha256(content.encode()).hexdigest()[:12]
        version = self.spec_data["generator_version"]
        return self.cache_dir / f"v{version}" / f"{instance.instance_id}-{p['seed']}-{key}.duckdb"

    def latent(self) -> dict:
        """True survival per instance and cohort (for the oracle only)."""
        out = {}
        for v in self.schedule.variants:
            for inst in v.instances:
                truth = self._truth(inst.payload["region"])
                out[inst.instance_id] = {cid: [float(x) for x in row] for cid, row in zip(self.cohorts, truth)}
        return {"truth": out, "time_points_months": list(self.points)}

    def _enter(self, slot: Slot, fresh: bool) -> str:
        # The database is read-only and agents write nothing, so `fresh` needs no extra work.
        self._close_connection()
        self._current = self.build(slot.instance)
        self._con = connect_readonly(str(self._current.path))
        study = self.studies[slot.instance.payload["study"]]
        lines = [
            f"Instance {slot.position + 1} of {len(self._order)}: study {study.name} ({study.spec['title']}), "
            f"region {slot.instance.payload['region']}.",
            self.brief,
            "",
            "Standard variables:",
            *[f"- {v.describe()}" for v in self.population.variables.values()],
            "",
            f"Cohorts (report survival at {', '.join(map(str, self.points))} months for every one):",
            *[f"{cid}: {text}" for cid, text in self.cohort_texts.items()],
            "",
            f"Tools ({self.max_steps} calls for this instance, the report included): "
            + "; ".join(f"{t['function']['name']}: {t['function']['description']}" for t in self.tools),
            self.action_grammar,
        ]
        return "\n".join(lines)

    # ------------------------------------------------------------------ actions
    @property
    def tools(self) -> list[dict]:
        expr = {"type": "string", "minLength": 1, "maxLength": 4000}
        probs = {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}, "minItems": 3, "maxItems": 3}
        return [
            tool_schema("get_database_metadata", "The study's design, enrollment, region and every column of the "
                        "patients table with its type and description.", {}),
            tool_schema("get_data_summary", "Per-column summaries of the patients table and the overall "
                        "Kaplan-Meier survival at 12/24/36 months (the flat baseline).", {}),
            tool_schema("query_sql", "Run one read-only SELECT on the patients table (DuckDB SQL; 10 s limit; "
                        "at most 50 rows shown).", {"sql": {"type": "string", "minLength": 1, "maxLength": 20000}}),
            tool_schema("estimate_survival_by_group",
                        "Kaplan-Meier survival (lifelines) at 12, 24 and 36 months for each group of patients given "
                        "by a SQL expression over the patients table, typically CASE WHEN ... THEN 'label' END "
                        "(NULL = left out; at most 40 groups). Pass one `group_expression` or up to 12 "
                        "`group_expressions`.",
                        {"group_expression": expr,
                         "group_expressions": {"type": "array", "items": expr, "minItems": 1, "maxItems": 12}},
                        required=[]),
            tool_schema("submit_cohort_report", "Submit the final report: for every cohort C01..C36 the survival "
                        "probabilities at 12, 24 and 36 months. Ends the instance.",
                        {"survival": {"type": "object", "additionalProperties": probs}}),
        ]

    def _parse_text(self, text: str) -> ToolCall:
        stripped = text.strip()
        names = [t["function"]["name"] for t in self.tools]
        m = re.match(r"^(\w+)\s*(?::\s*(.*))?\Z", stripped, re.DOTALL)
        if m and m.group(1).lower() in names:
            name, rest = m.group(1).lower(), (m.group(2) or "").strip()
            # every text form is checked against the tool's schema, as a JSON call is: `QUERY_SQL:` with
            # nothing after it is a call without its required `sql`, not a call for _act to trip over
            if not rest:
                return validate_call(ToolCall(name, {}), self.tools)
            if rest.startswith("{"):
                obj = extract_json(rest)
                if not isinstance(obj, dict):
                    raise ActionError(f"{name}: the arguments after ':' are not a JSON object")
                return validate_call(ToolCall(name, obj), self.tools)
            if name == "query_sql":
                return validate_call(ToolCall(name, {"sql": rest}), self.tools)
            if name == "estimate_survival_by_group":
                return validate_call(ToolCall(name, {"group_expression": rest}), self.tools)
            raise ActionError(f"{name} takes JSON arguments, e.g. `{name}: {{...}}`")
        if re.match(r"^(select|with|from)\b", stripped, re.IGNORECASE):
            return validate_call(ToolCall("query_sql", {"sql": stripped}), self.tools)
        raise ActionError(f"could not read the action. Tools: {', '.join(names)}. {self.action_grammar}")

    def _act(self, call: ToolCall) -> Outcome:
        handler = {
            "get_database_metadata": self._metadata,
            "get_data_summary": self._summary,
            "query_sql": self._query,
            "estimate_survival_by_group": self._estimate,
            "submit_cohort_report": self._submit,
        }.get(call.tool)
        if handler is None:
            raise ActionError(f"unknown tool {call.tool!r}")
        return handler(call.arguments)

    def _metadata(self, args: dict) -> Outcome:
        study = self.studies[self._slot.instance.payload["study"]]
        types = {r[0]: r[1] for r in self._con.execute("DESCRIBE patients").fetchall()}
        return Outcome(views.metadata_text(study, self._slot.instance.payload["region"], self._slot.instance_id,
                                           len(self._current.data.table), types))

    def _summary(self, args: dict) -> Outcome:
        d = self._current.data
        return Outcome(views.summary_text(d.table, list(self._current.baseline), int(d.events.sum()), self.points))

    def _query(self, args: dict) -> Outcome:
        res = run_query(self._con, args["sql"], timeout=QUERY_TIMEOUT_S)
        return Outcome(res.text)

    def _estimate(self, args: dict) -> Outcome:
        exprs = list(args.get("group_expressions") or [])
        if "group_expression" in args:
            exprs.insert(0, args["group_expression"])
        if not exprs:
            raise ActionError("estimate_survival_by_group needs `group_expression` (a string) or "
                              "`group_expressions` (a list of up to 12 strings)")
        if len(exprs) > self.max_expressions:
            raise ActionError(f"at most {self.max_expressions} expressions per call (got {len(exprs)})")
        study = self.studies[self._slot.instance.payload["study"]]
        t, e = study.time, study.event
        per_month = float(t["per_month"])
        blocks = [f"Kaplan-Meier survival (lifelines) at {', '.join(map(str, self.points))} months; "
                  f"time = {t['column']}, death when {e['column']} = {sql_literal(e['dead'])}."]
        rejected = (ExpressionRejected, QueryRejected, duckdb.Error)
        valid = []
        for expr in exprs:
            try:
                valid.append(check_expression(expr))
            except ExpressionRejected:
                pass
        valid = list(dict.fromkeys(valid))
        # every valid expression in one query (each query has a fixed cost that dominated a call); if
        # that query fails, each expression again on its own, so every one gets its own result or error
        try:
            batch = dict(zip(valid, self._fetch_groups(valid, t["column"], e["column"], e["dead"])))
        except rejected:
            batch = {}
        for expr in exprs:
            try:
                parsed = check_expression(expr)
                columns = batch.get(parsed) or self._fetch_groups([parsed], t["column"], e["column"], e["dead"])[0]
            except rejected as exc:
                blocks.append(f"Expression: {expr}\nError: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
                continue
            blocks.append(self._km_block(expr, *columns, per_month))
        return Outcome("\n\n".join(blocks))

    def _fetch_groups(self, exprs: list[str], time_col: str, event_col: str, dead) -> list[tuple[np.ndarray, ...]]:
        """(time, death, group label) columns of each expression; NULL reads as NaN, False and None."""
        if not exprs:
            return []
        # named columns: a result's columns come back in a dict keyed by name
        labels_sql = ", ".join(f"CAST((\n{expr}\n) AS VARCHAR) AS g{k}" for k, expr in enumerate(exprs))
        sql = (f"SELECT {quote_ident(time_col)} AS t, ({quote_ident(event_col)} = {sql_literal(dead)}) AS e, "
               f"{labels_sql} FROM patients")
        statement = readonly_statement(self._con, sql)
        try:
            with time_limit(self._con, QUERY_TIMEOUT_S):
                # numpy columns: building a Python tuple per row cost most of a KM call
                time, event, *label_columns = self._con.execute(statement).fetchnumpy().values()
        except duckdb.InterruptException:
            raise ExpressionRejected(f"evaluation interrupted after the {QUERY_TIMEOUT_S:g} s time limit") from None
        time = np.ma.asarray(time).astype(float).filled(np.nan)
        event = np.ma.asarray(event).astype(bool).filled(False)
        out = []
        for label in label_columns:
            labels = np.array(np.ma.getdata(label), dtype=object)
            labels[np.ma.getmaskarray(label)] = None
            out.append((time, event, labels))
        return out

    def _km_block(self, expr: str, time: np.ndarray, events: np.ndarray, labels: np.ndarray, per_month: float) -> str:
        keep = labels != None  # noqa: E711  (elementwise on an object array)
        distinct = sorted(set(labels[keep].tolist()))
        if len(distinct) > self.max_groups:
            return f"Expression: {expr}\nError: {len(distinct)} groups; at most {self.max_groups} are allowed"
        months = time / per_month
        groups = []
        for label in distinct:
            m = keep & (labels == label)
            groups.append((label, int(m.sum()), int(events[m].sum()), km_at(months[m], events[m], self.points)))
        return views.km_table(expr, groups, int((~keep).sum()), self.points)

    def _submit(self, args: dict) -> Outcome:
        report = args.get("survival")
        if not isinstance(report, dict):
            raise ActionError('submit_cohort_report needs {"survival": {"C01": [S12, S24, S36], ...}}')
        missing = [c for c in self.cohorts if c not in report]
        unknown = [c for c in report if c not in self.cohorts]
        if missing or unknown:
            parts = []
            if missing:
                parts.append(f"missing cohorts: {', '.join(missing)}")
            if unknown:
                parts.append(f"unknown cohorts: {', '.join(map(str, unknown[:10]))}")
            raise ActionError("; ".join(parts) + f". Report all of {', '.join(self.cohorts)} with 3 probabilities each")
        values = np.array([report[c] for c in self.cohorts], dtype=float)
        if values.shape != (len(self.cohorts), len(self.points)) or not np.all(np.isfinite(values)):
            raise ActionError(f"each cohort needs {len(self.points)} finite probabilities in [0, 1]")
        if values.min() < 0 or values.max() > 1:
            raise ActionError("probabilities must lie in [0, 1]")
        gain = information_gain_bits(self._current.truth, self._current.baseline, values, self.eps)
        return Outcome(f"Report recorded for {len(self.cohorts)} cohorts. This instance is over.\n"
                       + self._feedback(gain, values), done=True,
                       reward=gain, raw_metric=("information_gain_bits", gain), solved=gain > 0)

    def _feedback(self, gain: float, report: np.ndarray) -> str:
        """The score and its two aggregate parts, nothing per cohort (Feedback)."""
        truth = self._current.truth
        base_kl = binary_kl_bits(truth, np.broadcast_to(self._current.baseline, truth.shape), self.eps).mean()
        report_kl = binary_kl_bits(truth, report, self.eps).mean()
        return score_report(gain, "information gain in bits over the flat baseline", [
            ("mean KL(true || baseline)", f"{base_kl:.4f} bits"),
            ("mean KL(true || your report)", f"{report_kl:.4f} bits"),
            ("gain = baseline KL - report KL", f"{base_kl - report_kl:.4f} bits")])

    # ------------------------------------------------------------------ cleanup
    def _close_connection(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def close(self):
        self._close_connection()
        self._built.clear()
        super().close()

