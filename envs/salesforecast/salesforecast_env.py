"""SalesForecast-v6: demand forecasting for a furniture retailer in a persistent sandboxed workspace."""
from __future__ import annotations

import json
import re
import sys

from clbench.actions import ActionError, ToolCall, extract_json, tool_schema
from clbench.env import InstanceSequenceEnv, Outcome
from clbench.feedback import score_report
from clbench.envs.salesforecast.generator import InstanceData, draw_world, generate_world, make_instance
from clbench.envs.salesforecast.scoring import EXAMPLE, parse_predictions, skill, wape
from clbench.envs.salesforecast.workspace import INBOX, open_workspace, refresh_inbox
from clbench.sandbox import Sandbox, SandboxError
from clbench.schedule import Instance, Schedule, Slot, Variant

_SUBMIT = re.compile(r"SUBMIT\b\s*:?\s*(.*)\Z", re.IGNORECASE | re.DOTALL)
_BASH = re.compile(r"bash\s*:\s*(.*)\Z", re.IGNORECASE | re.DOTALL)
_FENCE = re.compile(r"```(?:bash|sh|shell)?[ \t]*\n(.*?)\n?```\s*\Z", re.DOTALL)
MAX_SUBMISSION_BYTES = 1_000_000
#: what the brief promises the workspace's python3 can import
TOOLCHAIN = ("numpy", "scipy", "sklearn", "pandas")
#: (backend, runtime) pairs whose toolchain imported fine in this process
_TOOLCHAIN_OK: set[tuple] = set()


class SalesForecastEnv(InstanceSequenceEnv):
    """
    ## Description
    The agent is the demand analyst of a furniture retailer with three stores and a catalog of
    products in collections and types (new products launch in the last variant). Each instance is
    one forecast year: the workspace's `inbox/` holds the previous year's sales export of one store
    (the visible store rotates; each store's system writes its own layout and column names, plus
    non-causal distractor columns such as a weather index or marketing spend), the catalog with
    planned list prices, and `request.json`: 75 cells (5 products x 3 stores x 5 years), including
    stores and products absent from the export. Latent structure: a demand growth rate per
    collection, one price elasticity, store levels and store-by-type interactions. Three variants
    of four years: steady prices; repricing of part of the catalog; new products.
    Concept drift (at the second variant, not announced): a regime change in the hidden dynamics:
    one store's demand level falls and one collection's growth turns to decline; what was learned
    about store levels and growth from earlier years now overshoots (`regime_change` and `drifts`
    in the task YAML). Nothing the agent is shown (its brief, the variant descriptions) says when
    or what the change is.
    The agent works in a sandbox (no network, read-only system, python3 with numpy, scipy,
    scikit-learn and pandas). Stateful, the workspace persists across instances (scripts, panel
    files, fitted models); `inbox/` is replaced each year. Future sales never exist inside it.

    This env holds agent-written state that cannot be rebuilt from the slot alone (the
    workspace), so `resumable = False`: an interrupted stateful rollout is restarted, not
    continued from a saved agent state.

    ## Action Space
    `Text`, one action per reply:
    * a shell command, run with bash in /workspace (`bash: <cmd>`, a ```bash fenced block or
      the plain command); at most 20 per instance; or
    * `SUBMIT <path>` (a predictions file in the workspace; bare `SUBMIT` means
      predictions.json) or `SUBMIT {json}` inline (a bare `{"predictions": [...]}` also works).
    Predictions JSON: `{"predictions": [{"product_id": "P01", "store": "SF", "year": 2027,
    "units": 12.5}, ...]}` (or the bare list) with exactly the 75 requested cells and finite
    units >= 0. Tool calls: `{"tool": "bash", "arguments": {"command": ...}}` and
    `{"tool": "submit", "arguments": {"path": ...}}` or `{"predictions": [...]}`.

    ## Observation Space
    `Text` (printable ASCII): at the start, the year, the inbox files and the requested products,
    stores and years; after a command, its exit code, stdout and stderr (each cut to 20,000
    characters); after a submission, its score and feedback or what was wrong with it.

    ## Feedback
    The terminal observation states the score and the WAPE over all 75 cells (the reward in
    another form), and for the forecast year Y itself only: its WAPE, its WAPE per store, and the
    realised units of its 15 cells next to the forecast (what the analyst's books show at the end
    of year Y; year Y is never requested again, and the next instance's export shows one store's
    year Y anyway). Nothing about the four later years is shown: no per-year WAPE, no sums of
    actual units or of errors (v1 gave the 5-year sum of actual units, which with the year-Y units
    revealed the later years' total, e.g. a coming drop), because the next instances ask for those
    very cells (instance fyY requests Y..Y+4).

    ## Rewards
    WAPE skill `max(0, 1 - sum|pred - actual| / sum actual)` over the 75 cells (actual = the
    realised Poisson sales), on the step that ends the instance; 0 on other steps. It is floored
    at 0 so one absurd forecast cannot outweigh a task's other instances; the unfloored WAPE is
    `raw_metric = ("wape", value)`. solved = WAPE <= 0.2. r_max = the oracle's mean (it predicts
    the true expected demand); r_reference = the stateless reference agent's mean.

    ## Episode End
    Terminates on an accepted submission. A malformed submission or action returns what was
    wrong, costs a step and may be resubmitted; three invalid actions in a row end the instance
    with reward 0. The budget is 21 steps (at most 20 shell commands, then a submission); when it
    runs out without an accepted submission the instance scores 0 (truncated).

    ## Arguments
    `schedule` ("default": 12 years in 3 variants; "short": 4 years for tests), `backend`
    (sandbox backend: "auto" = docker when `image` is given and present, else bubblewrap;
    "bwrap", "docker", "unsafe-local" = no isolation, for debugging only: the agent could then
    read the task data), `image` (Docker image with python3, numpy, scipy, scikit-learn and
    pandas; none ships), `command_timeout` (seconds per shell command, default 60), `cycle`,
    `render_mode` ("ansi"), `split` ("test", the benchmark's company; "train": ids
    "train-fyYYYY"), `world_seed` (None: the canonical company of tasks/salesforecast/default.yaml;
    N: store levels, base volumes, growth rates, price response, seasonality and the regime change
    drawn anew from ranges of their own, never a canonical value, `generator.draw_world`). Every
    world but the canonical one (the train split too) draws them.

    ## Version History
    * v6 (the canonical world's dynamics and scoring unchanged; recalibrated): the stateless reference forecasts a
      store with no data of its own at the visible store's level times a factor fitted on the train split
      (tasks/salesforecast/fit_reference.py), not 1: per-year WAPE weighs over-forecasting the small stores of a year
      whose visible store is the largest more than under-forecasting the large ones, and the red team's store-shrink
      family (v5's forecast with those stores x0.7-0.8) beat v5's reference. The factor falls with the visible
      store's volume, clip(A + B * log level, 0.3, 1.5) (a small visible store makes larger unseen ones likely): a
      constant one (0.7) was beaten by the red team's volume-shrink family (two factors split at a volume threshold).
    * v5 (no change to the canonical world's dynamics or scoring, nor to r_max and r_reference; fresh
      worlds and the stateful reference changed, so fresh-world results differ from v4's): a drawn world's regime change cuts a store other than the largest,
      as the canonical one does (cutting the largest pulled it toward the others and erased the store
      differences a memory learns: world 16's reference gained 0.02 of its headroom). The reference, stateful,
      adds the realised units its last feedback showed to its panel (a cut store shows a year later, whichever
      export is visible), fits growth from three years of a store on, and damps its trend past the panel.
    * v4: fresh worlds (`world_seed`) and the train split draw every latent value from ranges of their
      own (store levels, each type's base volume, growth rates, price elasticity, the seasonal quarter
      split, the regime's cut and new decline); v3 shuffled and jittered the canonical store levels and
      growth rates and kept the base volumes and quarter split, which the public task YAML states. The
      stateless reference's price term is relative to the type's mean catalog price (v3's, relative to
      the whole catalog, extrapolated a type missing from the export by its price level: with base
      volumes independent of price, red-team forecasters reached it in 3 of 20 fresh worlds);
      recalibrated. The canonical world's dynamics and scoring are unchanged.
    * v3: the stateless reference no longer shrinks its single-year forecast (scale 1.0, was 0.9, a value
      tuned on the canonical world): with it a memoryless price-adjusted forecaster beat the reference
      in a fresh world; now none of the red team's forecasters reaches it in the canonical world or in
      worlds 1-20, nor a new `trend-scaled` family (steeper decline, scale, stronger price response);
      recalibrated. Scoring and dynamics unchanged.
    * v2: the feedback shows the forecast year only (v1's 5-year sum of actual units and per-year
      WAPE revealed the later years, which later instances ask for); the agent card and variant
      descriptions say nothing about the regime change; public text names no effect or regime
      value; `world_seed` (train worlds draw their effects too); red-team `policy_families`
      (naive, price-adjusted, trend, seasonal, shrinkage forecasters); recalibrated.
    * v1 (split kwarg, no change to the test split): `split="train"` for training.
    * v1: regime change at the second variant: real concept drift; the reference weighs recent
      years more; the terminal observation carries the score's parts and the forecast year's
      realised units; the brief states what invalid actions and an exhausted budget cost.
    * v0: initial release.
    """

    env_id = "clbench/SalesForecast-v6"
    reward_unit = "WAPE skill 0-1"
    brief = (
        "You are the demand analyst of a furniture retailer with stores in San Francisco (SF), New York (NY) and "
        "Chicago (CHI). Each forecast year you get, in the inbox/ folder of your sandboxed workspace, last year's "
        "sales export of one store (each store's system uses its own layout and column names, and some columns are "
        "irrelevant), the product catalog with planned prices, and request.json listing 75 cells (product, store, "
        "year) to forecast for the next five years, including stores and products missing from the export. Work "
        "with shell commands (python3 with numpy, scipy, scikit-learn and pandas; no network; /tmp is wiped "
        "after every command), then submit your predictions. Files outside inbox/ stay in the workspace for "
        "later years; inbox/ is replaced every year. Each year allows 20 shell commands and 21 steps; a "
        "submission must hold exactly the requested cells and is final once accepted. An invalid action or "
        "submission is rejected with the reason and costs a step; three in a row, or running out of steps "
        "without an accepted forecast, score the year 0."
    )
    reward_text = ("WAPE skill max(0, 1 - sum|pred - actual| / sum actual) over the 75 requested cells "
                   "(actual = realised unit sales); 1.0 is perfect.")
    feedback_text = (
        "After an accepted forecast: the score (1 - WAPE over all requested cells) and, for the forecast year "
        "itself only, its WAPE, its WAPE per store and its realised units next to your forecast. Nothing about "
        "the later requested years is shown: later instances ask for them.")
    action_grammar = (
        "One action per reply: a shell command run with bash in /workspace (optionally prefixed 'bash:'), at most "
        "20 per year; or SUBMIT <path> to submit a predictions file from the workspace (bare SUBMIT = "
        f"predictions.json), or SUBMIT followed by the JSON inline. Predictions JSON: {EXAMPLE} with exactly the "
        "requested cells and units >= 0."
    )
    max_commands = 20
    invalid_action_costs_step = True
    max_invalid_repeats = 3
    #: wall seconds of an instance (sandboxed commands in the workspace), roughly: the runner starts the dearest jobs first
    instance_seconds = 2.0
    #: the workspace is agent-written state the slot alone cannot rebuild: restart, don't resume
    resumable = False
    #: fixed replies that ignore the observation (clbench.agents.degenerate, tests/test_honest_scores.py)
    degenerate_answers = {"submit-default": "SUBMIT", "list-inbox": "ls inbox"}
    #: memoryless forecasters from one read of the inbox (agents/salesforecast_redteam.py), played stateless
    policy_families = {
        "naive": ("clbench.agents.salesforecast_redteam:Forecaster", {"fill": ["type", "all"], "scale": [0.8, 1.0, 1.25]}),
        "price-adjusted": ("clbench.agents.salesforecast_redteam:Forecaster", {"elasticity": [0.5, 1.0, 1.5, 2.0]}),
        "trend": ("clbench.agents.salesforecast_redteam:Forecaster",
                  {"trend": [0.9, 0.95, 1.05, 1.1], "elasticity": [0.0, 1.3]}),
        "seasonal": ("clbench.agents.salesforecast_redteam:Forecaster", {"annualise": ["q4x4", "h2x2"]}),
        "shrink-to-type": ("clbench.agents.salesforecast_redteam:Forecaster",
                           {"shrink": [0.3, 0.6, 1.0], "elasticity": [0.0, 1.0]}),
        # an attacker's next try: steeper decline, a scale, stronger price response, pooled fill; the full grid
        # (CLBENCH_SLOW=1) is the 96 points measured on worlds 1-20
        "trend-scaled": ("clbench.agents.salesforecast_redteam:Forecaster",
                         {"trend": [0.85], "elasticity": [1.3, 2.5], "scale": [0.9], "fill": ["all"]},
                         {"full_grid": {"trend": [0.8, 0.85, 0.9], "elasticity": [0.0, 1.3, 2.0, 2.5],
                                        "scale": [0.7, 0.8, 0.9, 1.0], "shrink": [0.0, 0.5], "fill": ["all"]}}),
        # red team rt8: the reference's single-year forecast with the unseen stores scaled down
        "store-shrink": ("clbench.agents.salesforecast_redteam:StoreShrink", {"other": [0.7, 0.8]}),
        # the same forecast at factor 1, the unseen stores scaled by a factor set by the visible store's volume:
        # thresholds at the train split's quantiles 0.33/0.5/0.67 of its log level
        "volume-shrink": ("clbench.agents.salesforecast_redteam:VolumeShrink",
                          {"threshold": [3.94, 4.24, 4.54], "lo": [0.5, 0.6], "hi": [1.1]}),
    }
    agents = {
        "reference": "clbench.agents.salesforecast:SalesForecastReference",
        "oracle": "clbench.agents.salesforecast:SalesForecastOracle",
    }

    def __init__(self, schedule: str = "default", backend: str = "auto", image: str | None = None,
                 command_timeout: float = 60.0, cycle: bool = False, render_mode: str | None = None,
                 split: str = "test", world_seed: int | None = None):
        if not command_timeout > 0:
            raise ValueError(f"command_timeout must be > 0 seconds, got {command_timeout!r}")
        self.backend, self.image = backend, image
        self.command_timeout = float(command_timeout)
        self._sb: Sandbox | None = None
        self._commands = 0
        super().__init__(schedule=schedule, cycle=cycle, render_mode=render_mode, split=split, world_seed=world_seed)

    # ------------------------------------------------------------------ schedule and world
    def _build_schedule(self, name: str) -> Schedule:
        schedules = self.spec_data["schedules"]
        if name not in schedules:
            raise ValueError(f"unknown schedule {name!r}; known: {sorted(schedules)}")
        # the canonical company as written; any other world (train, fresh) draws its effects and regime anew
        spec = self.spec_data if self.canonical_world else draw_world(self.spec_data, self.world_rng("effects"))
        self.world = generate_world({**spec, "seed": self.draw_seed(self.spec_data["seed"])})
        variants = []
        for v in schedules[name]:
            insts = tuple(Instance(f"fy{y}", v["name"], make_instance(self.world, y, v)) for y in v["years"])
            variants.append(Variant(v["name"], insts, v.get("description", "")))
        return Schedule(name, variants)

    def latent(self) -> dict:
        return self.world.latent()

    @property
    def tools(self) -> list[dict]:
        cell = {"type": "object", "properties": {
            "product_id": {"type": "string"}, "store": {"type": "string"}, "year": {"type": "integer"},
            "units": {"type": "number", "minimum": 0}}, "required": ["product_id", "store", "year", "units"]}
        return [
            tool_schema("bash", "Run one shell command with bash in /workspace (at most 20 per forecast year).",
                        {"command": {"type": "string", "minLength": 1}}),
            tool_schema("submit", "Submit the forecast: either `path` (a predictions JSON file in the workspace) "
                                  "or `predictions` inline, exactly the requested cells.",
                        {"path": {"type": "string", "minLength": 1},
                         "predictions": {"type": "array", "items": cell, "maxItems": 1000}}, required=[]),
        ]

    # ------------------------------------------------------------------ instances
    def _enter(self, slot: Slot, fresh: bool) -> str:
        data: InstanceData = slot.instance.payload
        if fresh or self._sb is None or self._sb.closed:
            self._close_workspace()
            self._sb = open_workspace(self.backend, self.command_timeout, self.image)
            self._check_toolchain()
        refresh_inbox(self._sb, data.files)
        self._commands = 0
        years = sorted({y for _, _, y in data.cells})
        products = sorted({p for p, _, _ in data.cells})
        stores = [s["id"] for s in self.spec_data["stores"]]
        return "\n".join([
            f"Forecast year {data.year} (instance {slot.position + 1} of {len(self.schedule)}). "
            "Workspace: /workspace (keep files here; /tmp is wiped after every command).",
            f"New in {INBOX}/ (replaced every year):",
            f"  {data.export} - {data.store['name']} ({data.store['id']}) sales export for {data.year - 1}, "
            "in that store's own format",
            f"  {INBOX}/catalog.csv - products on sale, with planned list prices {years[0]}-{years[-1]}",
            f"  {INBOX}/request.json - the {len(data.cells)} cells to forecast",
            f"Requested products: {' '.join(products)}; stores: {' '.join(stores)}; years: {years[0]}-{years[-1]} "
            f"({len(data.cells)} cells)",
            f"You have {self.max_commands} shell commands and {self.max_steps} steps for this year.",
            self.action_grammar,
        ])

    def _check_toolchain(self) -> None:
        """The brief promises python3 with these libraries: a workspace without them would score
        every forecast 0 with no error, so reset fails instead (checked once per process and runtime)."""
        key = (self._sb.backend, self._sb.runtime)
        if key in _TOOLCHAIN_OK:
            return
        res = self._sb.run(f"python3 -c 'import {', '.join(TOOLCHAIN)}'", timeout=max(60.0, self.command_timeout))
        if not res.ok:
            self._close_workspace()
            where = f"the Docker image {self.image!r}" if key[0] == "docker" else \
                f"the Python that runs clbench ({sys.executable}), which the sandbox uses"
            raise SandboxError(
                f"{self.env_id}: the workspace's python3 cannot import {', '.join(TOOLCHAIN)} "
                f"({(res.killed or res.stderr.strip().splitlines()[-1:] or ['no output'])[-1][:300]}). Fix: "
                f"install them into {where} (pip install numpy scipy scikit-learn pandas)"
                + ("" if key[0] == "docker" else ", or pass image=... with them and backend='docker'"))
        _TOOLCHAIN_OK.add(key)

    def _parse_text(self, text: str) -> ToolCall:
        stripped = text.strip()
        if not stripped:
            raise ActionError(f"empty action. {self.action_grammar}")
        m = _SUBMIT.match(stripped)
        if m:
            rest = m.group(1).strip()
            if rest.startswith(("{", "[", "```")):
                obj = extract_json(rest)
                if obj is None:
                    raise ActionError(f"SUBMIT: the inline JSON does not parse. Expected {EXAMPLE}")
                return ToolCall("submit", {"inline": obj})
            return ToolCall("submit", {"path": rest.strip("`'\"") or "predictions.json"})
        if stripped.startswith("{"):
            obj = extract_json(stripped)
            if isinstance(obj, dict) and "predictions" in obj:
                return ToolCall("submit", {"inline": obj})
        m = _BASH.match(stripped) or _FENCE.match(stripped)
        command = m.group(1).strip() if m else stripped
        if not command:
            raise ActionError(f"empty shell command. {self.action_grammar}")
        return ToolCall("bash", {"command": command})

    def _act(self, call: ToolCall) -> Outcome:
        if call.tool == "bash":
            return self._run(call.arguments["command"])
        if call.tool == "submit":
            return self._submit(call.arguments)
        raise ActionError(f"unknown tool {call.tool!r}; use bash or submit")

    def _run(self, command: str) -> Outcome:
        if self._commands >= self.max_commands:
            raise ActionError(f"all {self.max_commands} shell commands of this year are used; SUBMIT your forecast")
        self._commands += 1
        res = self._sb.run(command)
        status = f"exit code {res.exit_code}" if res.killed is None else f"killed: {res.killed}"
        lines = [f"$ {command if len(command) <= 300 else command[:300] + ' ...'}",
                 f"{status} | shell commands left: {self.max_commands - self._commands} | "
                 f"steps left: {self.max_steps - self._step_count - 1}"]
        if res.stdout:
            lines += ["--- stdout ---", res.stdout.rstrip("\n")]
        if res.stderr:
            lines += ["--- stderr ---", res.stderr.rstrip("\n")]
        if not res.stdout and not res.stderr:
            lines.append("(no output)")
        return Outcome("\n".join(lines))

    def _submit(self, args: dict) -> Outcome:
        if "inline" in args:
            obj = args["inline"]
        elif "predictions" in args:
            obj = args["predictions"]
        elif "path" in args:
            obj = self._read_submission(args["path"])
        else:
            raise ActionError(f"submit needs a workspace `path` or inline `predictions`. {self.action_grammar}")
        data: InstanceData = self._slot.instance.payload
        preds = parse_predictions(obj, data.cells)
        actual = {c: self.world.sales[c] for c in data.cells}
        w = wape(preds, actual)
        score = skill(w)
        obs = (f"Forecast for {data.year}-{data.year + 4} accepted ({len(preds)} cells).\n"
               + self._feedback(data.year, score, w, preds, actual))
        return Outcome(obs, done=True, reward=score, raw_metric=("wape", w), solved=w <= 0.2)

    @staticmethod
    def _feedback(year: int, score: float, w: float, preds: dict, actual: dict) -> str:
        """The score and WAPE, and year `year` alone in detail: later years are asked again (Feedback)."""
        def part(cells) -> str:
            return f"WAPE {wape({c: preds[c] for c in cells}, {c: actual[c] for c in cells}):.4f}"

        first = [c for c in actual if c[2] == year]
        lines = [f"Forecast year {year}: {part(first)}; by store: " + "; ".join(
            f"{st} {part([c for c in first if c[1] == st])}" for st in dict.fromkeys(c[1] for c in first))]
        lines.append(f"Realised units of {year} (later years are not shown: later instances ask for them): "
                     "product store | forecast | actual")
        lines += [f"  {p} {st} | {preds[(p, st, y)]:.1f} | {actual[(p, st, y)]}" for p, st, y in first]
        return score_report(score, "1 - WAPE over all requested cells, floored at 0",
                            [("WAPE over all requested cells", f"{w:.4f}")], lines)

    @classmethod
    def public_secrets(cls) -> list[str]:
        """The canonical company's effects and regime change as text would state them: growth factors and
        their yearly percentages, the price elasticity, store levels, the regime's store cut and new trend
        (bare decimals such as a growth factor alone occur in unrelated text, so they come with their words)."""
        from clbench.env import load_task_spec

        spec = load_task_spec(cls.task)
        out = set()
        for coll, rate in spec["collections"].items():
            out |= {f"{coll}: {rate}", f"{rate:.2f} a year", f"{(rate - 1) * 100:+.0f}% a year"}
        e = spec["price_elasticity"]
        out |= {f"elasticity {e}", f"elasticity of {e}", f"price_elasticity: {e}"}
        out |= {f"level {st['level']}" for st in spec["stores"]}
        change = spec["regime_change"]
        for sid, factor in change["store_levels"].items():
            name = next(st["name"] for st in spec["stores"] if st["id"] == sid)
            out |= {f"{sid}: {factor}", f"falls by {(1 - factor) * 100:.0f}%", f"{name}'s demand level falls",
                    f"competitor opens next to the {name}"}
        for coll, rate in change["growth"].items():
            out |= {f"{rate:.2f} a year", f"{coll} collection", f"{coll} trend", f"{(rate - 1) * 100:+.0f}% a year"}
        return sorted(out)

    def _read_submission(self, path: str):
        try:
            raw = self._sb.read_file(path)
        except (SandboxError, OSError) as exc:
            # strerror, not str(exc): the latter names the host folder behind /workspace
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ActionError(f"cannot read {path!r} from the workspace ({type(exc).__name__}: {why}); "
                              "give a path relative to /workspace") from None
        if len(raw) > MAX_SUBMISSION_BYTES:
            raise ActionError(f"{path} is larger than {MAX_SUBMISSION_BYTES} bytes")
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise ActionError(f"{path} is not valid JSON ({exc}); expected {EXAMPLE}") from None

    def _on_budget_exhausted(self) -> Outcome:
        return Outcome(f"Step budget of {self.max_steps} used up without an accepted forecast; this year scores 0.\n"
                       + score_report(0.0, "no accepted forecast"),
                       done=True, reward=0.0, raw_metric=("wape", 1.0), solved=False)

    def _on_invalid_cap(self) -> Outcome:
        return Outcome(f"{self.max_invalid_repeats} invalid actions in a row; this year scores 0.\n"
                       + score_report(0.0, "no accepted forecast"),
                       done=True, reward=0.0, raw_metric=("wape", 1.0), solved=False)

    # ------------------------------------------------------------------ cleanup
    def _close_workspace(self) -> None:
        if self._sb is not None:
            self._sb.close()
            self._sb = None

    def close(self):
        self._close_workspace()
        super().close()
