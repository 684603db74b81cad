"""CodeRepair-v6: an engineer fixes a sequence of reported bugs in real Python projects, across releases."""
from __future__ import annotations

import hashlib
import re
import secrets
import tempfile
import time
from pathlib import Path

import numpy as np
from clbench.actions import ActionError, ToolCall, tool_schema
from clbench.env import InstanceSequenceEnv, Outcome, load_task_spec
from clbench.feedback import score_report
from clbench.envs.coderepair import house
from clbench.envs.coderepair.checkout import agent_checkout, normalize_tree
from clbench.envs.coderepair.evaluation import Evaluation, Kept, evaluate_tree
from clbench.envs.coderepair.grading import pytest_ini
from clbench.envs.coderepair.issues import Issue, load_issue
from clbench.envs.coderepair.patching import apply_diff
from clbench.envs.coderepair.runtime import runtime_for, runtime_key
from clbench.envs.coderepair.sources import pristine_tree
from clbench.sandbox import BACKENDS, Limits, Sandbox, SandboxUnavailable, open_sandbox
from clbench.sandbox.base import copy_tree
from clbench.sandbox.select import choose_backend, docker_ready
from clbench.schedule import Instance, Schedule, Slot, Variant

_FENCE = re.compile(r"```(?:bash|sh|shell|console)?[ \t]*\n(.*?)```", re.DOTALL)
#: the review's regression-test runs of this process, by issue, tree, test and runtime (`_run_regression_test`)
REVIEWED = Kept(256)


class CodeRepairEnv(InstanceSequenceEnv):
    """
    ## Description
    The agent is a software engineer who receives bug reports for real open-source Python
    projects, the sdists of tablib 3.5.0 (9 issues), then tenacity 7.0.0 (4 issues) and tenacity
    8.2.3 (13 issues) from PyPI, verified by sha256. Each issue is a realistic regression injected
    into the real source (a reviewed diff), reported like a real bug report (symptoms and a
    reproduction, never the fix). Every issue starts from a fresh checkout at `/testbed` (a
    one-commit git repository) from which the tests that catch the bug (FAIL_TO_PASS) are removed;
    every file in it has the same dates and mode, so none singles out the bug. Latent structure
    that a learning agent can carry from issue to issue: where the logic of each project lives,
    where its tests are and how they run, its conventions and the kinds of regression that recur;
    issues of one project touch overlapping modules; and the team's house conventions (below),
    which no report states and the feedback teaches only by naming the one not met. Commands run
    in a sandbox (clbench.sandbox):
    Docker or bubblewrap, no network, read-only system, resource limits and a per-command time
    limit.

    ## Action Space
    `Text`: one bash command per step (a fenced ```bash block in prose is taken as the command),
    or the JSON tool calls `{"tool": "bash", "arguments": {"command": "..."}}` and
    `{"tool": "submit", "arguments": {}}`. Every command runs in a fresh shell in `/testbed`
    (cd and variables do not persist; files do). Submitting: the `submit` tool, the text
    `submit`, or a command whose output ends with the line
    `COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` (e.g. `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`).
    An empty command is invalid (it costs a step; three in a row end the issue with reward 0).

    ## Observation Space
    `Text` (printable ASCII): first the issue's tracker number (`Tracker: #N`), the report with the
    project, its release and the rules (naming the kinds of house convention, never their values);
    then `<returncode>N</returncode>` and `<output>...</output>` of each command (stdout, then
    stderr, each cut to its head and tail with a note; a note when the sandbox killed it); after
    the submission, the score and feedback.

    ## House conventions (house.py)
    Besides the fix, the team's review checks five conventions; each is met or not:
    `fragment-folder` and `fragment-type` (a changelog fragment: exactly one new or changed
    non-Python file outside the source and test folders, hidden paths aside, non-empty, in the
    project's fragment folder and named `<tracker number>.<type>`), `test-location` and
    `test-name` (a regression test: exactly one new Python test file, a `.py` file below the
    tests folder or named `test*`, at the project's place for them, holding exactly one test
    function, named the project's way), and `test-behaviour` (that file, alone with the
    release's code, run with the test runtime's pytest in a fresh sandbox: it must fail on
    the release with the bug, any failure or a kill but not "no tests collected", and then, in
    another, pass on the fixed release; only the exit status is read, on the host). The folder, type, place and
    name are drawn per world from common choices of Python projects (towncrier-style fragment
    folders and types, regression-test layouts and names), and change at the declared drift
    (see Drift). They are written in
    tasks/coderepair/default.yaml for the canonical world and drawn with `world_rng` elsewhere.

    ## Feedback
    The terminal observation states the score and its parts (steps to submit, the verdict with
    how many issue and other tests pass, how many house conventions were met and the name and
    kind of each one not met, e.g. "test-name: not met (the regression test function is not
    named the way the project names them)", never what it should have been, the source files
    graded and the changed files ignored),
    and the ids and outcomes of the tests that did not pass (FAILED: ran and observed something
    else than the fixed release; MISSING: no records; the first 20): what CI tells an
    engineer about a pull request. The hidden tests' code and the true fix are not shown: each
    issue is played once per rollout and they answer no other issue, but they are the issue's
    answer key, and a test id already says what failed.

    ## Rewards
    On submission the workspace diff below the package's source folder (test files, including
    tests shipped inside the package as in tenacity 7.0.0's tenacity/tests, and other files are
    ignored) is applied to a fresh checkout with the hidden tests restored, and the FAIL_TO_PASS
    and PASS_TO_PASS tests run in the sandbox. When all of them pass the reward is
    `(0.5 + 0.5 * met / 5) * (1 - (steps_to_submit - 1) / 80)` (met: the house conventions met of
    the five), else 0: the fix is required, the conventions are worth up to half of it, and each
    step costs half of what it did in v3 (raw metric `issue_regret`: steps_to_submit - 1, or 40
    when unresolved). 0 on every other step.
    Submitting: a command whose output ends with the submit line counts as the submission of the
    workspace as that command left it, so a fix and `&& echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`
    in one command is one step (the oracle does that).
    The verdict is not decided where the code under test runs (threat model: grading.py and
    docs/coderepair-threat-model.md). In the sandbox, the run's test modules, rewritten on the
    host, record what each check looks at (values compared, whether a comparison holds, the
    exception raised, warnings, mock calls) with literal expected values and the checks'
    polarity left out, and the hidden tests run under fresh names; the env's process, which
    never imports the repository, reads the records as untrusted data and compares them with
    those of the fixed release (two trusted runs, only what both agree on, cached on the host).
    A test passes when it ended normally and observed everything the fixed release observed.
    Nothing of the fix is reachable in a sandbox: no pip (it vendors released packages) and no
    wheel or folder holding a copy of any release on the schedule (the reachable-copy check,
    copies.py). A record file the runner did not write scores 0 with the verdict "tampering",
    nothing more (`info["tampering"]` is True).

    ## Reference agents
    The oracle applies the true fix (it reads it: privileged) and defines r_max. The reference
    (clbench.agents.coderepair.CodeRepairReference) sees only what any agent sees: it finds and
    runs the project's tests, turns the report's reproduction into a check and searches a catalog
    of common regression edits, confirmed by the check and the visible tests. It cannot find a fix
    on its own for most issues: on the default schedule it resolves 8 of the 26 (tablib-03,
    tablib-05, tenacity-04, -11, -12, -13, -16 and -17; elsewhere the report states no checkable
    expectation, the fix is outside its catalog or beyond its search budget, or a wrong edit
    passes its check and the visible tests);
    On submission it writes a changelog fragment and a regression test that runs its check, at the
    house conventions it believes (knowing nothing: the most common choice of each, first in its list).
    r_reference is its stateless mean. Stateful it skips the exploration steps on later
    issues of a project, tries the edit kinds that worked first, and revises each house
    convention the feedback names as not met (the next of its common choices; the conventions
    are the team's, so what it learns on tablib carries to tenacity), so it meets all five
    after a few issues. The strongest memoryless policy written here (the red-team family
    `house-guesser`: the same search, a fixed guess of the conventions) is measured against it.
    Measured on v4 (canonical world, bwrap, one rollout): r_max 1.0 (the oracle on all 26, and
    on Docker); r_reference 0.2132 (0.2136 re-measured on v6: one search step fewer on tenacity-12;
    it resolves 8; knowing nothing of the house its guesses meet one of the four drawn conventions
    before the drift and two after); stateful 0.2882, a
    normalized gain of 0.095 (v3: 0.025): it meets all five from the fifth tablib issue on, and
    again within a few issues after the drift (four of five on the third); house-guesser 0.199, 0.184, 0.199
    (priors 1, 2, 3; the search's per-issue steps as measured, the conventions met by each guess;
    played for prior 1 on the 4 issues before the drift, equal as computed). A capable agent
    that fixes every issue in 4 steps without memory meets what its fixed guess matches (at best
    the most common choices: one of the four drawn before the drift and two after in the canonical
    world, one to three per era in a fresh world), 0.67 to 0.87 per issue, against 0.96 once it
    knows them and 1.0 for the oracle.
    Fresh worlds (v5, `world_seed` 1-20; bwrap): the reference's stateless actions do not depend on
    the conventions it cannot see, so whether it fixes an issue, in how many steps, and whether its
    regression test behaves are the same in every world; r_reference and the red team's fixed guesses
    are computed per world from those per-issue outcomes and the world's draw
    (envs/coderepair/worlds.py), and checked against worlds played in full. r_max 1.0 (the oracle
    played on all 26 of world 1: 1.0 on each); r_reference mean 0.236, range [0.227, 0.242] (the
    most common choices meet one to three of an era's four drawn conventions; world 1 played
    0.2420, computed 0.2416: the same outcome on 26 of 26 issues, one search step fewer on
    tenacity-12 on a less loaded machine; world 2 played 0.2418, computed 0.2414, the same); the
    best fixed guess of the red team's family (house-guesser priors 1-3 and the canonical world's
    published values) mean 0.207, range [0.199, 0.227], below the reference
    in all 20 (each prior played on world 1's 8 issues the search resolves: the same outcomes and
    conventions as computed on 24 of 24 plays; 0.199, 0.171, 0.185 against the reference's 0.242).
    Stateful, played on worlds 1 and 2: 0.2882 and 0.2957, normalized gains 0.061 [0.019, 0.131] and
    0.071 [0.024, 0.138] (canonical 0.095: the most common choices meet more in a fresh world, so
    less is left to learn); drift cost 0.283 [0.073, 0.506] and 0.298 [0.075, 0.592] per 8.2.3 issue
    (canonical 0.291; frozen at the drift it fixes none of the 13: played on world 2, as argued for
    world 1). Over worlds 1-20, estimated from the reference's house learning (its own begin/end_instance
    fed each issue's lessons in the world's order) and the steps its memory saves (as played on the
    canonical world; frozen it fixes none after the drift): normalized gain 0.065, range [0.043, 0.088],
    drift cost 0.284 [0.253, 0.299] per 8.2.3 issue, in the band of the canonical world's in all 20
    (the estimate gives canonical 0.095 and 0.291, world 1 0.061 and 0.283, world 2 0.071 and 0.299
    against 0.298 played; tests/test_coderepair.py). It assumes the stateful reference resolves the 8
    issues the stateless one does; world 2 replayed gave the same numbers again (stateful 0.2957, frozen
    fixing none of 13), world 1 replayed under load ~20 left tenacity-04 unresolved (4 searches, no fix:
    stateful 0.2544, gain 0.017, drift cost 0.216; not yet analysed: the edit kinds it learned first
    reorder its search, and its 60 s commands are cut under load), so a played world can fall below
    the estimate. Worlds 3 and 4 played stateful (8 resolved each): gain 0.048 and 0.038 (estimated
    0.052, 0.043), after the drift 0.274 and 0.251 per 8.2.3 issue (estimated 0.276, 0.253). The gain is lower than canonical's in every fresh
    world because the canonical draw leaves the most to learn: the most common choices meet one of its
    four drawn conventions before the drift and two after, fresh worlds one to three, so over the 8
    issues the reference resolves it gains 18 conventions on the canonical world and 6 to 16 elsewhere.
    `computed_baselines()` gives a world's r_max and r_reference from worlds.py (what
    clbench.calibration.ensure_baselines uses instead of playing them). In the canonical world the published values
    are the truth (0.284 as a fixed guess, above r_reference): reading the task file is what
    fresh worlds rule out.

    ## Drift
    At the tenacity 7.0.0 -> 8.2.3 boundary (declared in tasks/coderepair/default.yaml) the house
    conventions change (in every world all but one of the four drawn ones), so what was learned
    before is wrong after it and costs until the feedback revises it; and tenacity
    8.0 stopped packaging its tests (its release note `do_not_package_tests`), so 7.0.0 ships them
    in `tenacity/tests/` and 8.2.3 in a top-level `tests/` folder. v4, `clbench drift-check
    --rollouts 1` (bwrap): after the drift the unfrozen reference scores 0.291 per 8.2.3 issue
    (4 fixed, three of them meeting all five conventions), frozen before it 0 (it fixes none, as
    on v2): drift cost 0.291 per issue. The numbers below were measured on v2. Where the tests live and the
    command that runs them, learned on 7.0.0, is wrong on 8.2.3; an agent that trusts it confirms
    nothing with the tests. The observation names each issue's project and release (the variant
    names are the releases, e.g. `tenacity-8.2.3`): that the release changed is visible, what
    changed is not said. `clbench drift-check --rollouts 3` (measured on v2; v3 changed the
    grading, not what the reference does): frozen before 8.2.3, the reference
    scores 0.285 less per 8.2.3 issue than unfrozen (drift cost, 95% CI [0.071, 0.508]; goal
    0.1 x (r_max - r_reference) = 0.074). Unfrozen it loses no 8.2.3 issue to the drift: the first edit that passes its check there
    shows it, inside that issue, that its test command tests nothing, and it finds the tests
    again (three steps). (drift-check's "instances to recover", 6, is when the 5-issue
    moving average regains its 7.0.0 level, which 8.2.3's smaller share of issues the reference
    can fix delays.) Frozen, it revises nothing and fixes none of the 13 (see
    clbench.agents.coderepair.CodeRepairReference for what frozen means and why).

    ## Episode End
    Terminated at submission; truncated when the 40-step budget runs out (reward 0).

    ## Arguments
    `schedule` ("default"; "short": one to two issues per release, the drift kept), `backend`
    ("auto" | "docker" | "bwrap" | "unsafe-local"; auto takes Docker when the engine answers and
    every release's image exists, else bubblewrap; unsafe-local has no isolation and warns),
    `command_timeout` (seconds per command, default from the task spec), `cycle`, `render_mode`
    ("ansi"), `split` ("test" only; "train" raises ValueError: the 26 issues are real bug reports
    in real tablib and tenacity releases, not drawn from a generator, so there are no other seeds
    to draw training issues from), `world_seed` (None: the canonical world; N: a fresh world
    drawing the house conventions of each era, the tracker numbers and the order of each
    release's issues from `world_rng`, the conventions accepted as house.py states: no fixed guess
    of the red team's family meets more of them than the most common choices; the 26 regressions
    themselves are the same).

    ## Version History
    - v0: 19 issues (tablib 3.5.0, tenacity 8.2.3), 40 steps, efficiency reward.
    - v1: tamper-proof grading (tampering scores 0), checkouts whose files all look alike, an
      honest scripted reference (r_reference recalibrated); the terminal observation states the
      score, its parts and the failing tests (see Feedback; released with v1, rewards unchanged).
    - v1 (split kwarg, no change to the test split): `split`; "train" is refused (see Arguments).
    - v2: a real concept drift: tenacity 7.0.0 (tests inside the package) joins before 8.2.3;
      26 issues (tenacity-01 and -09 ported to 7.0.0, 8 new regressions); the observation names
      the project (not a release key); tests inside the source folder are ignored by the grading
      and read-only in its run; a `short` schedule; the reference finds and runs the tests before
      trusting them and learns from the feedback when they moved (r_reference recalibrated).
    - v3: a verdict no code in the sandbox decides (checks record observations, compared with the
      fixed release's outside the sandbox; canaries and the signed verdict retired); no pip and no
      other copy of a release in either sandbox (venvs and images rebuilt, image tags `-v3`); the
      submit rule stated as applied; the tampering verdict says only "tampering"; red-team
      policy families and the reachable-copy probe; `world_seed` refused (recalibrated).
    - v4: room to learn: five house conventions (changelog fragment folder and type, regression
      test place, name and behaviour) drawn per world and era, changing at the declared drift,
      taught by feedback that names the one not met; reward
      `(0.5 + 0.5 * met/5) * (1 - (steps - 1)/80)` if resolved; a `Tracker: #N` line; `world_seed`
      draws the conventions, tracker numbers and issue order; red-team family `house-guesser`
      (recalibrated).
    - v5: fresh worlds' house conventions are drawn with an acceptance rule (house.py): under v4's
      uniform draw a fixed guess of the red team's family (a step along the lists, or the canonical
      world's published values) reached the reference in 18 of worlds 1-20; now in none, in any
      world, and the most common choices are the best fixed guess on average over worlds. The
      canonical world is unchanged (its numbers stand).
    - v6: grading that holds on any day and checks measurements by their bounds: every graded test
      starts on the checkout's wall clock (test runtimes with time-machine, image tags `-v4`), a
      measurement compared with a literal bound is kept in the fixed release's records when its
      bound's outcome agrees in both trusted runs, and tenacity-06 carries a hidden test with
      written-out sums (its bug was forgeable); the reference's search bounds checks by CPU time.
      r_max and r_reference unchanged (the oracle's fixes pass; the reference does not fix
      tenacity-06).
    """

    env_id = "clbench/CodeRepair-v6"
    reward_unit = "step-efficiency score 0-1"
    brief = ("Resolve each reported bug in the repository checked out at /testbed as efficiently as "
             "possible: one bash command per step, then submit. Issues come from two projects, tablib and "
             "tenacity (in two successive releases), maintained by one team whose review also checks house "
             "conventions no report states, so knowledge of their layout, tests and conventions transfers. (The scripted reference sees only what an agent sees and fixes 8 of the 26 "
             "issues on its own.)")
    reward_text = ("When every FAIL_TO_PASS and PASS_TO_PASS test passes after submission (observes what it observes "
                   "on the fixed release): (0.5 + 0.5 x met/5) x (1 - (steps_to_submit - 1)/(2 x {max_steps})), where met counts "
                   "the house conventions the submission meets (of five: changelog fragment folder and type, regression "
                   "test place, name, and behaviour: fails on the release with the bug, passes on the fixed release); "
                   "else 0; 0 when the code under test tampers with the test run. Only changes inside the package's "
                   "source folder are graded as the fix (tests, conftest.py, site files and the like are ignored by the "
                   "hidden tests). Every command costs a step, an empty or invalid reply too; 3 invalid replies in a row "
                   "or {max_steps} steps without submitting end the issue with 0")
    feedback_text = ("After submission: the score and its parts (steps to submit, issue and other tests passing, house "
                     "conventions met, each one not met named with its kind but never its value, source files graded, "
                     "changed files ignored) and the ids and outcomes of the tests that did not pass (first 20). The "
                     "hidden tests' code and the true fix are not shown.")
    action_grammar = ("One bash command per message (or a ```bash fenced block), or JSON "
                      '{"tool": "bash", "arguments": {"command": "..."}} / {"tool": "submit", "arguments": {}}. '
                      "Submit with the submit tool, the reply `submit`, or a command whose output ends with the line "
                      "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT: `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` alone, or "
                      "after the fix in the same command (`<fix> && echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`: one "
                      "step); the workspace is graded as the command left it.")
    invalid_action_costs_step = True
    max_invalid_repeats = 3
    #: wall seconds of an instance (a repair's sandboxed commands and graded submission), roughly: the runner starts the dearest jobs first
    instance_seconds = 10.0
    #: fixed replies that ignore the observation (clbench.agents.degenerate, tests/test_honest_scores.py)
    degenerate_answers = {"submit-marker": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}
    agents = {"reference": "clbench.agents.coderepair:CodeRepairReference",
              "oracle": "clbench.agents.coderepair:CodeRepairOracle"}
    runtime = "the verified sdists, the bubblewrap test venvs and the per-repository Docker images"

    @classmethod
    def build_runtime(cls, *, offline_base: bool = False, force: bool = False, bwrap: bool = True,
                      docker: bool = True) -> None:
        from clbench.envs.coderepair.images import build_images, prepare_sources, prepare_venvs
        from clbench.sandbox.bwrap import bwrap_works

        prepare_sources()
        if bwrap:
            ok, why = bwrap_works()
            if ok:
                prepare_venvs(load_task_spec(cls.task)["workdir"])
            else:
                print(f"bwrap runtime skipped: {why}")
        if docker:
            build_images(offline_base=offline_base, force=force)

    no_train_split = ("its 26 issues are real bug reports injected into real tablib and tenacity releases, "
                      "not drawn from a generator: there are no other seeds to draw training issues from, and "
                      "any of the 26 used for training would be a benchmark problem")

    #: memoryless attacks on the grading the red team plays (agents/coderepair_redteam.py); both score 0
    policy_families = {
        "vendored-restore": ("clbench.agents.coderepair_redteam:VendoredRestore",
                             {"source": ["vendored-dir", "wheel"]}),
        "grading-forgery": ("clbench.agents.coderepair_redteam:GradingForgery",
                            {"mode": ["patch", "forge-file", "exit", "fake-verdict"]}),
        # the reference's search without memory, with a fixed guess of the house conventions
        "house-guesser": ("clbench.agents.coderepair_redteam:HouseGuesser", {"prior": [1, 2, 3]}),
    }
    #: modules of this package a scripted reference may import (no ground truth in them: house.py holds
    #: the common choices worlds draw from and the checks, never a world's choice)
    public_modules = ("patching", "house")

    @classmethod
    def public_secrets(cls) -> list[str]:
        """The canonical world's latent values: each injected regression's fixed lines (what the true
        fix restores), the names of its hidden tests, and the house conventions of each era."""
        spec = load_task_spec(cls.task)
        out: set[str] = set()
        for issue_id in sorted({i for blocks in spec["schedules"].values() for b in blocks for i in b["issues"]}):
            issue = load_issue(issue_id)
            for line in issue.fix_diff.splitlines():
                if line.startswith("+") and not line.startswith("+++") and len(line[1:].strip()) >= 24:
                    out.add(line[1:].strip())
            out.update(i.split("::")[-1] for i in issue.fail_to_pass)
        for era in house.written_eras(spec["house_conventions"]):  # the conventions, as they would be written
            raw = {name: house.CANDIDATES[name][i] for name, i in era.choice.items()}
            out.update([raw["fragment-folder"], "." + raw["fragment-type"], raw["test-location"].split("{n}")[0],
                        raw["test-name"].split("{n}")[0]])
        return sorted(out)

    @classmethod
    def redteam_probes(cls) -> dict:
        """Probes `clbench redteam` runs besides the policy families: name -> callable(backend="auto")
        returning {"passed": bool, ...}. `reachable-copies`: the copy scan (copies.py) of every
        repository runtime on the backend; passed when nothing outside the checkout matches a module
        of any release on the schedule."""
        def reachable(backend: str = "auto") -> dict:
            from clbench.envs.coderepair.copies import reachable_copies

            env = cls(schedule="short", backend=backend)
            try:
                scans = [reachable_copies(env, name) for name in env.spec_data["repos"]]
            finally:
                env.close()
            return {"passed": not any(s["matches"] for s in scans), "backend": env.backend, "scans": scans}

        return {"reachable-copies": reachable}

    def __init__(self, schedule: str = "default", backend: str = "auto", command_timeout: float | None = None,
                 cycle: bool = False, render_mode: str | None = None, split: str = "test",
                 world_seed: int | None = None):
        super().__init__(schedule=schedule, cycle=cycle, render_mode=render_mode, split=split, world_seed=world_seed)
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        spec = self.spec_data
        self.workdir = spec["workdir"]
        self.marker = spec["submit_marker"]
        self.command_timeout = float(command_timeout or spec["command_timeout"])
        self.eval_timeout = float(spec["eval_timeout"])
        self.limits = Limits(timeout=self.command_timeout, **spec["limits"])
        self.backend = self._resolve_backend(backend)
        self._sandbox: Sandbox | None = None
        self._issue: Issue | None = None
        # agent checkouts, built once per issue and process; sandboxes copy them (and diff against them)
        self._checkouts_dir: tempfile.TemporaryDirectory | None = None
        self._checkouts: dict[str, Path] = {}

    # ------------------------------------------------------------------ setup
    def _resolve_backend(self, backend: str) -> str:
        if backend != "auto":
            return choose_backend(backend)
        images = [runtime_for(name, repo, self.workdir, "docker") for name, repo in self.spec_data["repos"].items()]
        if all(docker_ready(rt)[0] for rt in images):
            return "docker"
        try:
            return choose_backend("bwrap")
        except SandboxUnavailable as exc:  # pragma: no cover - depends on the machine
            raise SandboxUnavailable(f"CodeRepair needs Docker (with `clbench containers build`) or bubblewrap: {exc}")

    def _build_schedule(self, name: str) -> Schedule:
        blocks = self.spec_data["schedules"].get(name)
        if blocks is None:
            raise ValueError(f"unknown schedule {name!r}; known: {sorted(self.spec_data['schedules'])}")
        self._draw_house(name, blocks)
        order = self.world_rng("issue-order") if not self.canonical_world else None
        variants = []
        for b in blocks:
            ids = list(b["issues"])
            if order is not None:  # a fresh world plays each release's issues in its own order
                ids = [ids[i] for i in order.permutation(len(ids))]
            variants.append(Variant(b["variant"], tuple(Instance(i, b["variant"], payload=load_issue(i)) for i in ids),
                                    b.get("description", "")))
        return Schedule(name, variants)

    def _draw_house(self, name: str, blocks: list[dict]) -> None:
        """This world's house conventions per era (a new era at each declared drift) and tracker numbers."""
        drift_variants = {d["variant"] for d in self.spec_data.get("drifts", {}).get(name, [])}
        self._era_of: dict[str, int] = {}
        era = 0
        for b in blocks:
            era += b["variant"] in drift_variants
            self._era_of[b["variant"]] = era
        written = self.spec_data["house_conventions"]
        if self.canonical_world:
            eras = house.written_eras(written)
        else:
            eras = house.draw_eras(self.world_rng("house-conventions"), len(written), house.written_eras(written))
        self._eras = [eras[min(e, len(eras) - 1)] for e in range(era + 1)]
        pool = sorted({i for sched in self.spec_data["schedules"].values() for b in sched for i in b["issues"]})
        if self.canonical_world:  # fixed numbers, distinct
            self._numbers, used = {}, set()
            for issue_id in pool:
                n = 100 + int(hashlib.sha256(issue_id.encode()).hexdigest(), 16) % 900
                while n in used:
                    n = 100 + (n - 99) % 900
                used.add(n)
                self._numbers[issue_id] = n
        else:
            drawn = self.world_rng("issue-numbers").choice(np.arange(100, 1000), size=len(pool), replace=False)
            self._numbers = {i: int(n) for i, n in zip(pool, drawn)}

    def computed_baselines(self) -> dict | None:
        """This world's r_max and r_reference computed, not played (`clbench worlds` uses them): the oracle
        fixes every issue in one step meeting every convention, and the stateless reference's outcome on an
        issue is the same in every world but for the conventions its fixed guess meets (worlds.py, checked
        against worlds played in full). None where default.yaml holds them (the canonical default)."""
        if self.baselines_from_spec:
            return None
        from clbench.envs.coderepair.worlds import REFERENCE_OUTCOMES, Outcome, era_guesses, family_means, guess_mean

        every = {i.instance_id: Outcome(True, 1, True) for v in self.schedule.variants for i in v.instances}
        truth = era_guesses(self)
        return {"r_max": guess_mean(self, every, lambda era: truth[era]),
                "r_reference": family_means(self, REFERENCE_OUTCOMES)["reference"],
                "computed": "envs/coderepair/worlds.py from the stateless reference's per-issue outcomes"}

    def conventions_for(self, issue_id: str, variant: str) -> house.Conventions:
        return self._eras[self._era_of[variant]]

    def _repo(self, name: str) -> dict:
        return self.spec_data["repos"][name]

    def _pristine(self, name: str) -> Path:
        repo = self._repo(name)
        return pristine_tree(repo["pypi"], repo["version"], repo["sdist_sha256"])

    def open_sandbox(self, tree: Path, repo_name: str, timeout: float | None = None, baseline: Path | None = None
                     ) -> Sandbox:
        """A sandbox of this env's backend on a copy of `tree` with `repo_name`'s test runtime. An env opens
        sandboxes one after another (the agent's, grading, review): docker prestarts the next one's container."""
        runtime = runtime_for(repo_name, self._repo(repo_name), self.workdir, self.backend)
        limits = self.limits.with_timeout(timeout)
        return open_sandbox(tree, backend=self.backend, runtime=runtime, workdir=self.workdir, limits=limits,
                            baseline=baseline, prestart=True)

    def _checkout(self, issue: Issue) -> Path:
        """The issue's pristine agent checkout (never handed to a sandbox itself, only copied)."""
        if self._checkouts_dir is None:
            self._checkouts_dir = tempfile.TemporaryDirectory(prefix="clbench-checkouts-")
        if issue.issue_id not in self._checkouts:
            dest = Path(self._checkouts_dir.name) / issue.issue_id
            agent_checkout(self._pristine(issue.repo), issue.bug_diff, list(issue.fail_to_pass), dest)
            self._checkouts[issue.issue_id] = dest
        return self._checkouts[issue.issue_id]

    # ------------------------------------------------------------------ hooks
    def _enter(self, slot: Slot, fresh: bool) -> str:
        # Every issue is a fresh checkout, stateful or not: what carries over is the agent's memory.
        self._close_sandbox()
        issue: Issue = slot.instance.payload
        self._issue = issue
        checkout = self._checkout(issue)
        self._sandbox = self.open_sandbox(checkout, issue.repo, baseline=checkout)
        normalize_tree(self._sandbox.host_workspace, atime=int(time.time()) + 5)  # the copy dated every file
        repo = self._repo(issue.repo)
        self._variant = slot.instance.variant
        return (f"--- Issue {slot.position + 1}/{len(self._order)} ---\n"
                f"Tracker: #{self._numbers[issue.issue_id]}\n"
                f"Repository: {repo['display']} ({repo['pypi']} {repo['version']}), checked out at {self.workdir}\n\n"
                f"{issue.text.strip()}\n\n"
                f"Fix the issue in the repository's source code ({repo['source_root']}/; changes elsewhere, "
                f"tests included, are ignored by the evaluation). One bash command per step; each runs in a "
                f"fresh shell in {self.workdir} (cd and variables do not persist, files do), with a "
                f"{self.command_timeout:g} s limit and no network. Submit with the submit tool or a command "
                f"whose output ends with the line {self.marker} (`echo {self.marker}`, alone or after the fix in "
                f"the same command). Steps: {self.max_steps}, the submission included. {self.house_text}")

    def _parse_text(self, text: str) -> ToolCall:
        stripped = text.strip()
        if stripped.lower() in ("submit", "/submit"):
            return ToolCall("submit", {})
        fenced = _FENCE.search(text)
        command = (fenced.group(1) if fenced else text).strip()
        if not command:
            raise ActionError(f"empty command. {self.action_grammar}")
        return ToolCall("bash", {"command": command})

    def _act(self, call: ToolCall) -> Outcome:
        if call.tool == "submit":
            return self._submit("")
        command = call.arguments["command"]
        if not command.strip():
            raise ActionError(f"empty command. {self.action_grammar}")
        result = self._sandbox.run(command)
        text = (f"<returncode>{result.exit_code if result.exit_code is not None else 'killed'}</returncode>\n"
                f"<output>\n{result.output()}</output>")
        lines = result.stdout.strip().splitlines()
        if lines and lines[-1].strip() == self.marker:
            return self._submit(text + "\n")
        return Outcome(text + f"\n(steps left: {self.max_steps - self._step_count - 1})")

    def _submit(self, prefix: str) -> Outcome:
        steps = self._step_count + 1
        issue = self._issue
        changes = self._sandbox.changes()
        evaluation = self.evaluate(issue, changes)
        met = self.review(issue, self._variant, changes)
        reward = house.reward(sum(met.values()), steps, self.max_steps) if evaluation.resolved else 0.0
        regret = float(steps - 1 if evaluation.resolved else self.max_steps)
        failing = [f"  {i}: {v}" for i, v in {**evaluation.fail_to_pass, **evaluation.pass_to_pass}.items()
                   if v != "PASSED"]
        missed = house.lessons(met)
        report = score_report(reward, self.formula, [
            ("steps to submit", f"{steps} of {self.max_steps}"), ("verdict", evaluation.summary()),
            ("house conventions met", f"{sum(met.values())} of {len(met)}"),
            ("source files graded", ", ".join(evaluation.applied) or "none (no change below the source folder)"),
            ("changed files ignored", ", ".join(evaluation.ignored) or "none")],
            ([f"House conventions not met ({len(missed)}):", *missed] if missed else [])
            + ([f"Tests that did not pass ({len(failing)}; the first 20):", *failing[:20]] if failing else []))
        return Outcome(f"{prefix}Submitted after {steps} steps. {evaluation.summary()}. Reward {reward:.3f}.\n{report}",
                       done=True, reward=reward, raw_metric=("issue_regret", regret), solved=evaluation.resolved,
                       extra={"tampering": evaluation.tampering,
                              "details": {"evaluation": evaluation.summary(), "changed_files": evaluation.applied,
                                          "ignored_files": evaluation.ignored, "backend": self.backend,
                                          "conventions_met": [k for k, v in met.items() if v]}})

    @property
    def formula(self) -> str:
        return (f"if resolved: (0.5 + 0.5 x share of the {len(house.NAMES)} house conventions met) x "
                f"(1 - (steps_to_submit - 1)/{2 * self.max_steps}); else 0")

    def review(self, issue: Issue, variant: str, changes) -> dict:
        """Which house conventions a submission meets (house.py): the file checks on the host, and the
        regression test run on the buggy and on the fixed tree in sandboxes (only their exit status read)."""
        repo = self._repo(issue.repo)
        conv = self.conventions_for(issue.issue_id, variant)
        found = house.review(changes, conv, self._numbers[issue.issue_id], repo["source_root"],
                             repo.get("tests_root", "tests"))
        met = {**found.met, "test-behaviour": False}
        if found.test_file is not None:
            on_buggy = self._run_regression_test(issue, found.test_file, False)
            if house.failed(on_buggy):  # else not met whatever the fixed tree does: that run is skipped
                on_fixed = self._run_regression_test(issue, found.test_file, True)
                met["test-behaviour"] = house.behaviour_met(on_buggy, on_fixed)
        return met

    def _run_regression_test(self, issue: Issue, test_file: tuple[str, bytes], fixed: bool):
        repo = self._repo(issue.repo)
        # the same test on the same tree and runtime ends the same: run once per process (evaluation.Kept)
        key = hashlib.sha256(repr((issue.issue_id, issue.bug_diff, issue.fix_diff if fixed else "", test_file,
                                   self.backend, self.workdir, repo, self.command_timeout)).encode()).hexdigest()
        result = REVIEWED.get(key)
        if result is None:
            result = self._regression_run(issue, repo, test_file, fixed)
            if not result.killed:  # a killed run proves nothing: it runs again next time
                REVIEWED.keep(key, result)
        return result

    def _regression_run(self, issue: Issue, repo: dict, test_file: tuple[str, bytes], fixed: bool):
        with tempfile.TemporaryDirectory(prefix="clbench-review-") as tmp:
            # the agent's checkout as it started (hidden tests cut out; the issue's pristine copy, built once),
            # with the true fix or not: what leaves this sandbox is its exit status, one bit
            tree = Path(tmp) / "tree"
            copy_tree(self._checkout(issue), tree)
            if fixed:
                apply_diff(tree, issue.fix_diff)
            path, content = test_file
            target = tree / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            ini = f".review-{secrets.token_hex(4)}/pytest.ini"
            (tree / ini).parent.mkdir()
            (tree / ini).write_text(pytest_ini(repo.get("pytest_ini")))
            with self.open_sandbox(tree, issue.repo, self.command_timeout, baseline=tree) as sandbox:
                return sandbox.run(house.regression_command(self.workdir, repo["import_root"], path, ini))

    def evaluate(self, issue: Issue, changes) -> Evaluation:
        """Score workspace `changes` for `issue` in a fresh checkout with the hidden tests restored."""
        repo = self._repo(issue.repo)
        runtime = runtime_for(issue.repo, repo, self.workdir, self.backend)
        # the grading tree is made for the sandbox and never compared with: it is its own baseline (no copy)
        return evaluate_tree(issue, self._pristine(issue.repo), changes,
                             lambda tree: self.open_sandbox(tree, issue.repo, self.eval_timeout, baseline=tree),
                             self.eval_timeout, self.workdir, repo, runtime_key(self.backend, runtime))

    house_text = ("House conventions apply (the review checks them; no report states them): a changelog fragment "
                  "(exactly one new non-Python file outside the source and test folders, named after the tracker "
                  "number) and a regression test (exactly one new Python test file, for the tests folder, holding "
                  "one test function that fails on the release with the bug and passes on the fixed release). "
                  "The feedback names the conventions not met.")

    @property
    def tools(self) -> list[dict]:
        return [
            tool_schema("bash", f"Run one bash command in {self.workdir} (fresh shell each time, no network).",
                        {"command": {"type": "string", "description": "the command line"}}),
            tool_schema("submit", "Submit the current workspace as the fix of this issue.", {}),
        ]

    def latent(self) -> dict:
        """Per issue id: the reference fix, the hidden tests and the house conventions (the oracle only)."""
        issues = {}
        for variant in self.schedule.variants:
            for inst in variant.instances:
                issue: Issue = inst.payload
                repo, n = self._repo(issue.repo), self._numbers[issue.issue_id]
                conv = self.conventions_for(issue.issue_id, variant.name)
                issues[issue.issue_id] = {"repo": issue.repo, "fix_diff": issue.fix_diff,
                                          "fail_to_pass": list(issue.fail_to_pass),
                                          "source_root": repo["source_root"], "tracker": n,
                                          "fragment_path": conv.fragment_path(n),
                                          "test_path": conv.test_path(repo.get("tests_root", "tests"), n),
                                          "test_name": conv.value("test-name", n)}
        return {"workdir": self.workdir, "submit_marker": self.marker, "issues": issues}

    # ------------------------------------------------------------------ cleanup
    def _close_sandbox(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None

    def close(self):
        self._close_sandbox()
        if self.backend == "docker":
            from clbench.sandbox.docker_backend import discard_spare

            discard_spare()
        if self._checkouts_dir is not None:
            self._checkouts_dir.cleanup()
            self._checkouts_dir = None
        self._checkouts.clear()
        super().close()

    def __del__(self):
        try:
            self._close_sandbox()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

