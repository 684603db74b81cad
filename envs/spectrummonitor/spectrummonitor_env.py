"""SpectrumMonitor-v6: blind spectrum monitoring from noisy scans."""
from __future__ import annotations

import json
from functools import cached_property

from clbench.actions import ActionError, ToolCall, extract_json, tool_schema
from clbench.env import InstanceSequenceEnv, Outcome
from clbench.feedback import score_report
from clbench.schedule import Instance, Schedule, Slot, Variant
from clbench.envs.spectrummonitor.generator import draw_world, generate, iou, measure, merge_intervals, overlap

_TRANSMITTER = {
    "type": "object",
    "properties": {
        "center_mhz": {"type": "number", "minimum": 0},
        "bandwidth_mhz": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000},
        "currently_active": {"type": "boolean"},
        "estimated_power_dbm": {"type": "number", "minimum": -200, "maximum": 50},
    },
    "required": ["center_mhz", "bandwidth_mhz"],
    "additionalProperties": True,
}


class SpectrumMonitorEnv(InstanceSequenceEnv):
    """
    ## Description
    An analyst reports, scan by scan, which transmitters occupy a radio band (its edges are stated
    in every scan), over a sequence of 90 noisy scans. The latent structure is the band plan:
    wideband channels separated by irregular guard gaps, each gap holding one narrowband channel.
    Transmitters are active or dormant for long runs. Each scan lists detected peaks with centre
    jitter, width error, missed detections, false alarms that mimic channels (a channel's width
    and power, placed where plans of this kind put channels) and short, narrow interference spikes. A single scan cannot
    tell a false alarm from a transmitter, nor give a channel's exact edges; an agent that has
    learned the plan from earlier scans can (recurrence), and snaps detections to the known
    channels.

    Three variants of 30 scans; more licensees appear in the second. **Concept drift** at the
    third variant: the regulator re-plans the band. Some live wideband channels are re-tuned
    (another centre and width), one is retired, and a new licensee takes over part of the
    retired channel's spectrum with another centre and width. What an agent learned about those
    channels before the re-plan is now wrong: snapping to the old plan misplaces them and
    treating unknown peaks as false alarms drops the new ones. Nothing the agent is shown (its
    brief, the variant names) says when or what the change is.

    ## Action Space
    `Text`: a JSON report `{"transmitters": [{"center_mhz": float, "bandwidth_mhz": float,
    "currently_active": bool, "estimated_power_dbm": float}, ...]}` (bare, fenced or inside
    prose), or the tool call `{"tool": "submit_report", "arguments": {"transmitters": [...]}}`.
    `currently_active` defaults to true; transmitters reported as not active are ignored.
    `estimated_power_dbm` is accepted and not scored (the brief says so).

    ## Observation Space
    `Text` (printable ASCII): scan number, band, noise floor and the table of detected peaks
    (id, centre MHz, power dBm, width MHz); after the report, its score and feedback.

    ## Feedback
    The terminal observation states the score (IoU), the MHz the agent reported as active (which
    it knows), how many of its reported transmitters overlapped a transmitting channel (a count,
    not which) and how many transmitting channels no reported band touched. That is all: the
    score itself, counts and the agent's own numbers. No MHz of overlap, occupied spectrum,
    centre, edge or per-transmitter verdict is shown: channels stay active for long runs, so
    those would answer the next scans and, over a few scans, hand over the band plan the task
    measures learning of. A count tells no more about where the channels are than the score does
    (one reported band per scan gives the same bit either way).

    ## Rewards
    Intersection over union, in MHz, between the union of the bands of the transmitters
    reported as currently active and the spectrum occupied by the channels transmitting in
    this scan, on the step that ends the scan; 0 on other steps. Claiming spectrum that is not
    occupied now (the whole band, a guessed plan, dormant channels, false alarms) enlarges the
    union and costs score, so no answer that ignores the scan beats reading it.
    raw_metric = ("iou", value). r_max = 1.0 (the oracle, which reads the true active set);
    r_reference = the stateless reference agent's mean.

    ## Episode End
    One episode is one scan. It terminates when a valid report is submitted. An invalid report
    (not JSON, wrong fields, out-of-band values) returns an error and costs a step; the budget
    is 2 steps, so it allows one more try, after which the scan scores 0 (truncated). The
    brief states this rule.

    ## Arguments
    `schedule` ("default": 90 scans in 3 variants; "short": 8 scans in 2 variants for quick
    tests), `cycle` (wrap around after the last scan instead of raising), `render_mode`
    ("ansi"), `split` ("test", the benchmark's scans; "train": ids "train-scan-NNN"),
    `world_seed` (None: the canonical world of tasks/spectrummonitor/default.yaml; N: a band
    plan and re-plan drawn anew, `generator.draw_world`, of the same kind and difficulty). Every
    world but the canonical one (the train split too) draws its plan, re-plan and scans anew.
    `redeal` (0: the benchmark's scans; K >= 1: the same world's plan, re-plan and allowed channels
    with its scans drawn anew, as the red team chooses its policies' parameters on): the plan comes
    from the task spec's or `world_rng`'s plan seed, only the scans from `draw_seed`.

    ## Version History
    * v6: a false alarm copies a channel of another plan drawn for the same band by the process this world's
      plan was drawn by (`generator.false_alarm`): its place, and the width and power of its role (a re-tuned
      channel's or the licensee's after the re-plan). v5 placed false alarms uniformly over the band with the two
      kinds' widths only, so where a peak lay and a re-planned width told a single scan what was real: red team
      rt8's `band-grid` (a memoryless filter keeping the peaks near the slots the band's edges pin) led v5's
      stateless reference by +0.031 IoU canonical and +0.037 in 20 of 20 fresh worlds. A drawn world's band is a
      fixed number of spacings wide and its margins and gaps are scaled to fill it, so the band's width tells
      nothing of the plan's layout. The red team adds `learned-filter`, a classifier fitted on the train split that
      may read where a peak lies (judged pooled over fresh worlds), and `shrunk-reference` (red team rt9: reported
      widths a few percent narrower beat v6's first reference by +0.0017 +- 0.0002 IoU over fresh worlds, since a
      noisy centre makes a full-width band stick out of its channel). The stateless reference reports wide peaks at
      0.95 of their pooled width and moves narrow ones' widths halfway to the scan's narrow median (`snapped`), and
      its weights are refitted (r_reference 0.573 -> 0.544); the stateful reference joins a detection to a channel
      within 2 MHz (v5: 30% of the width, which gathered the look-alikes near a channel into it) and takes a
      cluster seen in a fifth of the recent scans for a channel (v5: 15%), all chosen on the train split's worlds
      (normalized gain 0.286 -> 0.252).
    * v5: peak widths are measured with more noise (a single detection's width is a poor estimate of its
      channel's), so a single-scan analyst who pools the widths of a scan's peaks of one kind (the
      reference's `snapped`) beats every rule that echoes its peaks as measured by a margin that holds in
      every fresh world: v4's reference was no better than echoing every non-spike peak inside the band,
      so a family's point chosen on re-deals tied it in fresh worlds 3 and 12; the stateless reference's
      weights are refitted; the stateful reference takes a cluster seen twice for a channel (v4's three
      detections left it dropping real channels for most of the 8-scan `short` schedule, where its memory
      then lost to the stateless rule); the channels the re-plan changes are on the air through the week
      before it (left to chance, whether a stale plan knew them, and so the drift cost, swung between
      deals of one world's scans: 0.24-0.67 of the headroom over four deals of fresh world 18).
    * v4: redealable: the plan, the channels each week allows and the re-plan are drawn from their own
      seed (the world's), the scans from another (`draw_seed`), so a re-deal keeps the world; false
      alarms come per allowed channel of each kind (v3's fixed rate made a week with fewer channels
      one with more false alarms per real peak, which the scan number told a memoryless agent) and
      the first week has both kinds in the later weeks' proportion (v3's had half the narrowband
      channels); the re-plan's channels stay on the air through the week that brings them (v3's
      followed the on/off process from the start, so the drift cost swung with how long they happened
      to stay dormant: fresh worlds 8, 10 and 16 left the canonical world's band); the stateless reference moves a wide
      peak's width halfway to the scan's own width scale, and its weights are refitted; the red team
      chooses each family's point on re-deals and plays it on the benchmark.
    * v3: the stateless reference's single-scan rule is a logistic model of what one scan shows (a
      peak's width against the scan's own widest, spikes, overlaps, plan geometry, the band's edges,
      the scan's place) fitted on the train split's worlds and reporting the peaks more likely channels
      than not (v2's overlap rule was tuned on the canonical world and lost to memoryless rules on
      fresh worlds); narrowband channels transmit in every week (v2's first week had none, so the scan
      number told a memoryless agent narrow peaks were false alarms); twice the false alarms (v2's
      few made echoing nearly every peak the best single-scan answer); drawn worlds end the band as
      close to the last channel as it starts to the first, and a re-tuned channel or the licensee
      stays inside the band; the re-plan's channels start on the air (v2's drift cost depended on
      whether they happened to be dormant); the red team adds families that use the scan number
      and the plan's geometry.
    * v2: the feedback gives the score, the MHz reported and two counts (v1's overlap MHz per
      reported transmitter recovered channel edges to 0.01 MHz); false alarms mimic channels and
      the wideband gaps are irregular, so no single-scan rule (width, power, grid) tells them
      apart; the stateless reference drops narrow spikes and peaks overlapping a stronger one by
      more than 1 MHz (the canonical world's best single-scan rule found; the red team's
      `policy_families`); public text and the agent card name no plan value and say nothing
      about the re-plan; variants are named by week; `world_seed`.
    * v1 (split kwarg, no change to the test split): `split="train"` for training.
    * v1: the truth is the spectrum transmitting in each scan (v0 scored against all channels,
      active or dormant, so reporting the whole band earned ~0.8 without looking); false alarms
      look like channels; the band plan changes at the third variant (drift).
    * v0: initial release.
    """

    env_id = "clbench/SpectrumMonitor-v6"
    #: wall seconds of an instance (one scan), roughly: the runner starts the dearest jobs first
    instance_seconds = 0.002
    redealable = True
    reward_unit = "IoU"
    brief = (
        "You monitor a radio band (its edges are given in every scan) from a sequence of noisy scans. After each "
        "scan, report every transmitter that is transmitting in it: its centre frequency and bandwidth in MHz. "
        "Peaks can be missed, their centres and widths are noisy, and false alarms and short interference spikes "
        "occur that look like transmitters in a single scan. You are scored on how well your reported bands "
        "cover the spectrum occupied in this scan (intersection over union in MHz); claiming unoccupied spectrum "
        "costs score. Only the bands count: a transmitter marked currently_active false is ignored, and "
        "estimated_power_dbm is optional and not scored. One report ends the scan; if it is invalid you are "
        "told why and get one more try, after which the scan scores 0."
    )
    reward_text = ("IoU (MHz) between the reported active transmitters' bands and the spectrum occupied by the "
                   "channels transmitting in this scan; 1.0 is perfect.")
    feedback_text = (
        "After the report: the IoU, the MHz you reported as active, how many of your reported transmitters "
        "overlapped a transmitting channel (a count, not which) and how many transmitting channels no reported "
        "band touched. Nothing else about where the transmitting channels are is shown.")
    action_grammar = (
        'Reply with JSON: {"transmitters": [{"center_mhz": 400.0, "bandwidth_mhz": 12.5, '
        '"currently_active": true, "estimated_power_dbm": -70.0}, ...]} '
        '(currently_active defaults to true; estimated_power_dbm is optional and not scored; '
        'or the tool call {"tool": "submit_report", "arguments": {"transmitters": [...]}}).'
    )
    max_invalid_repeats = 2
    #: fixed replies that ignore the scan (clbench.agents.degenerate): the whole band, an even
    #: tiling of the canonical band by 13 channels (a guessed plan), and nothing
    degenerate_answers = {
        "everything": json.dumps({"transmitters": [{"center_mhz": 424.0, "bandwidth_mhz": 168.0}]}),
        "plan": json.dumps({"transmitters": [{"center_mhz": round(340.0 + 168.0 * (i + 0.5) / 13, 2),
                                              "bandwidth_mhz": 10.0} for i in range(13)]}),
        "nothing": json.dumps({"transmitters": []}),
    }
    #: memoryless, scan-reading policies the red team plays stateless over these grids (agents/spectrummonitor_redteam.py)
    policy_families = {
        "echo-threshold": ("clbench.agents.spectrummonitor_redteam:EchoThreshold",
                           {"min_width": [0.0, 1.0, 2.0, 3.0], "min_power": [-200.0, -95.0, -85.0],
                            "width_scale": [0.8, 1.0, 1.2]}),
        "width-partner": ("clbench.agents.spectrummonitor_redteam:WidthPartner",
                          {"tolerance": [0.1, 0.2, 0.35], "min_width": [0.0, 2.0]}),
        "no-overlap": ("clbench.agents.spectrummonitor_redteam:NoOverlap",
                       {"keep": ["stronger", "wider"], "slack": [0.0, 2.0], "min_width": [0.0, 2.0],
                        "width_scale": [0.9, 1.0]}),
        "strongest-k": ("clbench.agents.spectrummonitor_redteam:StrongestK",
                        {"k": [3, 5, 7, 9], "min_width": [0.0, 2.0]}),
        "grid": ("clbench.agents.spectrummonitor_redteam:GridFit",
                 {"tolerance_mhz": [1.5, 3.0], "min_width": [2.0]}),
        "schedule-echo": ("clbench.agents.spectrummonitor_redteam:ScheduleEcho",
                          {"before": [0, 20, 30, 45], "narrow": [0.45, 0.6], "slack": [-1.0, 0.0, 2.0]}),
        "plan-echo": ("clbench.agents.spectrummonitor_redteam:PlanEcho",
                      {"before": [0, 30], "support": [False, True], "inside": [False, True], "slack": [-1.0, 2.0]}),
        # red team rt8: the band's edges pin the plan's slots (every world's plan runs edge to edge); the wide
        # points are what the family finds best when the margins or gaps are drawn wider (branch sm6)
        "band-grid": ("clbench.agents.spectrummonitor_redteam:BandGrid",
                      {"margin": [4.5, 12.0], "tol_wide": [6.0, 12.0], "tol_narrow": [4.0, 9.0], "late": [2.0, 4.0]}),
        # red team rt9: the reference's peaks with narrower wide bands (centre noise makes full widths stick out)
        "shrunk-reference": ("clbench.agents.spectrummonitor_redteam:ShrunkReference",
                             {"width_scale": [0.93, 0.95, 0.97], "narrow_snap": [0.0, 0.5]}),
    }
    agents = {
        "reference": "clbench.agents.spectrummonitor:SpectrumReference",
        "oracle": "clbench.agents.spectrummonitor:SpectrumOracle",
    }

    def __init__(self, schedule: str = "default", cycle: bool = False, render_mode: str | None = None,
                 split: str = "test", world_seed: int | None = None, redeal: int = 0):
        super().__init__(schedule=schedule, cycle=cycle, render_mode=render_mode, split=split, world_seed=world_seed,
                         redeal=redeal)
        band = self.world["band"]
        self.low, self.high = float(band["low_mhz"]), float(band["high_mhz"])

    def _build_schedule(self, name: str) -> Schedule:
        if name not in self.spec_data["schedules"]:
            raise ValueError(f"unknown schedule {name!r}; known: {sorted(self.spec_data['schedules'])}")
        # the canonical world as written; any other (train, fresh) draws its plan (and plan seed) anew;
        # the scans come from draw_seed, which a re-deal changes and nothing latent depends on
        spec = self.spec_data if self.canonical_world else draw_world(self.spec_data, self.world_rng("band-plan"))
        self.world = {**spec, "seed": self.draw_seed(self.spec_data["seed"])}
        self.channels, scans = generate(self.world, name)
        variants = []
        for v in self.spec_data["schedules"][name]:
            insts = tuple(Instance(f"scan-{s.index + 1:03d}", v["name"], s) for s in scans if s.variant == v["name"])
            variants.append(Variant(v["name"], insts, v.get("description", "")))
        return Schedule(name, variants)

    @cached_property  # the band is fixed at construction; built once, not on every tool-call step
    def tools(self) -> list[dict]:
        # the schema states the band, so a report outside it is an invalid action, not a silent 0
        item = json.loads(json.dumps(_TRANSMITTER))
        item["properties"]["center_mhz"].update(minimum=self.low, maximum=self.high)
        item["properties"]["bandwidth_mhz"]["maximum"] = self.high - self.low
        return [tool_schema(
            "submit_report", "Submit the list of transmitters you believe occupy the band.",
            {"transmitters": {"type": "array", "items": item, "maxItems": 200}})]

    def latent(self) -> dict:
        """Every channel of every plan, and the channels transmitting in each scan (by instance id)."""
        return {"channels": [c.__dict__.copy() for c in self.channels], "band": (self.low, self.high),
                "active": {inst.instance_id: [c.__dict__.copy() for c in inst.payload.active]
                           for v in self.schedule.variants for inst in v.instances}}

    def _enter(self, slot: Slot, fresh: bool) -> str:
        scan = self._scan = slot.instance.payload
        lines = [
            f"Scan {slot.position + 1} of {len(self.schedule)} | band {self.low:.3f}-{self.high:.3f} MHz | "
            f"noise floor {self.world['noise_floor_dbm']:.1f} dBm",
            f"Detected peaks ({len(scan.peaks)}): id | centre MHz | power dBm | width MHz",
        ]
        lines += [f"P{i + 1} | {p.center:.2f} | {p.power:.1f} | {p.width:.2f}" for i, p in enumerate(scan.peaks)]
        if not scan.peaks:
            lines.append("(no peaks above the noise floor)")
        lines.append(self.action_grammar)
        return "\n".join(lines)

    def _parse_text(self, text: str) -> ToolCall:
        obj = extract_json(text)
        if obj is None:
            raise ActionError(f"no JSON report found. {self.action_grammar}")
        if isinstance(obj, list):
            obj = {"transmitters": obj}
        if not isinstance(obj, dict) or "transmitters" not in obj:
            raise ActionError(f'the report needs a "transmitters" list. {self.action_grammar}')
        return ToolCall("submit_report", {"transmitters": obj["transmitters"]})

    def _act(self, call: ToolCall) -> Outcome:
        if call.tool != "submit_report":
            raise ActionError(f"unknown tool {call.tool!r}; use submit_report")
        bands = []
        txs = call.arguments.get("transmitters")
        if not isinstance(txs, list):
            raise ActionError('"transmitters" must be a list')
        for i, tx in enumerate(txs):
            try:
                c, w = float(tx["center_mhz"]), float(tx["bandwidth_mhz"])
            except (KeyError, TypeError, ValueError):
                raise ActionError(f"transmitter {i}: needs numeric center_mhz and bandwidth_mhz") from None
            if not (self.low <= c <= self.high) or not (0 < w <= self.high - self.low):
                raise ActionError(f"transmitter {i}: centre must lie in {self.low}-{self.high} MHz and "
                                  f"bandwidth in (0, {self.high - self.low}] MHz (got {c}, {w})")
            if tx.get("currently_active", True) is not False:
                bands.append((c - w / 2, c + w / 2))
        truth = [c.interval for c in self._scan.active]
        score = iou(bands, truth, self.low, self.high)
        obs = f"Report received: {len(bands)} active transmitters.\n" + self._feedback(score, bands, truth)
        return Outcome(obs, done=True, reward=score, raw_metric=("iou", score), solved=score >= 0.9)

    def _feedback(self, score: float, bands: list[tuple[float, float]], truth: list[tuple[float, float]]) -> str:
        """The score, the MHz reported and two counts; nothing about where the channels are (Feedback)."""
        occupied = merge_intervals(truth, self.low, self.high)
        reported = merge_intervals(bands, self.low, self.high)
        hits = sum(1 for b in bands if overlap(merge_intervals([b], self.low, self.high), occupied) > 0)
        missed = sum(1 for c in truth if overlap(reported, merge_intervals([c], self.low, self.high)) == 0)
        return score_report(score, "IoU with the spectrum occupied in this scan", [
            ("reported as active", f"{measure(reported):.2f} MHz"),
            ("reported transmitters that overlapped a transmitting channel", f"{hits} of {len(bands)}"),
            ("transmitting channels no reported band touched", str(missed))])

    @classmethod
    def public_secrets(cls) -> list[str]:
        """The canonical plan's centres (to 0.1 and 0.01 MHz, and in whole MHz) and widths, and the numbers
        of the plan and re-plan as v1's docs stated them; tests/test_public_text.py keeps them out of public text."""
        from clbench.env import load_task_spec
        from clbench.envs.spectrummonitor.generator import generate as gen

        spec = load_task_spec(cls.task)
        channels, _ = gen(spec, "default")
        out = {"4-6 MHz", "24 MHz grid", "~15 MHz", "~5 MHz"}
        for c in channels:
            out |= {f"{c.center:.1f}", f"{c.center:.2f}", f"{round(c.center):d} MHz", f"{c.width:.2f} MHz"}
        rp = spec["replan"]
        out |= {f"{rp['retune_width_mhz']:g} MHz wide", f"{rp['licensee']['width_mhz']:g} MHz licensee",
                f"{rp['licensee']['offset_mhz'][0]:g}-{rp['licensee']['offset_mhz'][1]:g} MHz"}
        return sorted(out)

    def _on_invalid_cap(self) -> Outcome:
        return Outcome("No valid report after two tries; this scan scores 0.\n"
                       + score_report(0.0, "no valid report"), done=True, reward=0.0,
                       raw_metric=("iou", 0.0), solved=False)
