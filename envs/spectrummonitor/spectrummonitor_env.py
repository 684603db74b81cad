"""SpectrumMonitor-v1: blind spectrum monitoring from noisy scans."""
from __future__ import annotations

import json
from functools import cached_property

from clbench.actions import ActionError, ToolCall, extract_json, tool_schema
from clbench.env import InstanceSequenceEnv, Outcome
from clbench.feedback import score_report
from clbench.schedule import Instance, Schedule, Slot, Variant
from clbench.envs.spectrummonitor.generator import generate, iou, measure, merge_intervals, overlap

#: reported transmitters that get a verdict each (see Feedback: no mapping by thin slices)
VERDICTS = 20

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
    An analyst reports, scan by scan, which transmitters occupy a 168 MHz band (340-508 MHz),
    over a sequence of 90 noisy scans. The latent structure is the band plan: 7 wideband
    (~15 MHz) channels on a regular grid and 6 narrowband (~5 MHz) ones in the guard gaps.
    Transmitters are active or dormant for long runs. Each scan lists detected peaks with
    centre jitter (0.7 MHz), width error (12%), missed detections (15%), false alarms as wide and
    as strong as real channels, and short interference spikes. A single scan cannot tell a false
    alarm from a transmitter, nor give a channel's exact edges; an agent that has learned the
    plan from earlier scans can (recurrence), and snaps detections to the known channels.

    Three variants of 30 scans: five wideband channels; four narrowband channels join them;
    band-replan. **Concept drift** at band-replan (position 60): the regulator re-plans the
    band. Two of the live wideband channels are re-tuned (centre moved by 4-6 MHz, width
    narrowed to 10 MHz), one is retired, and a new licensee (8 MHz wide) takes over part of the
    retired channel's spectrum, 3-4.5 MHz off its old centre. What an agent learned about those
    channels before the re-plan is now wrong: snapping to the old plan misplaces them and
    treating unknown peaks as false alarms drops the new ones.

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
    The terminal observation states the score (IoU), its parts (MHz occupied, MHz reported,
    their overlap and union), a verdict on each reported transmitter (first 20 listed): the MHz
    of it that overlapped spectrum in use (hit) or none (false alarm), and how many transmitting
    channels no reported band touched. That is what a monitor learns when its report is checked
    against the licensees' transmission log: whether what it reported was on the air. The log's
    own entries (exact centres and edges of the channels transmitting, where the missed ones
    were) are not shown: channels stay active for long runs, so they would answer the next scans,
    and over a few scans they would hand over the band plan, the latent structure the task
    measures learning of. The verdicts are capped at 20 transmitters so that slicing the band
    into many thin reports cannot map the occupied spectrum in one scan.

    ## Rewards
    Intersection over union, in MHz, between the union of the bands of the transmitters
    reported as currently active and the spectrum occupied by the channels transmitting in
    this scan, on the step that ends the scan; 0 on other steps. Claiming spectrum that is not
    occupied now (the whole band, the whole plan, dormant channels, false alarms) enlarges the
    union and costs score, so no answer that ignores the scan beats reading it.
    raw_metric = ("iou", value). r_max = 1.0 (the oracle, which reads the true active set);
    r_reference = the stateless reference agent's mean.

    ## Episode End
    One episode is one scan. It terminates when a valid report is submitted. An invalid report
    (not JSON, wrong fields, out-of-band values) returns an error and costs a step; the budget
    is 2 steps, so it allows one more try, after which the scan scores 0 (truncated). The
    brief states this rule.

    ## Arguments
    `schedule` ("default": 90 scans in 3 variants; "short": 8 scans in 2 variants, the second
    one re-planned, for quick tests), `cycle` (wrap around after the last scan instead of
    raising), `render_mode` ("ansi"), `split` ("test", the benchmark's scans; "train": the same
    schedule drawn from another generator seed: another jittered band plan, re-planned the same way,
    other scans; ids "train-scan-NNN").

    ## Version History
    * v1 (split kwarg, no change to the test split): `split="train"` for training.
    * v1: the truth is the spectrum transmitting in each scan (v0 scored against all channels,
      active or dormant, so reporting the whole band earned ~0.8 without looking); false alarms
      look like channels; the band plan changes at the third variant (drift).
      The terminal observation carries the score's parts and per-transmitter feedback (see
      Feedback); the brief states the one retry and no longer asks for power (never scored) or
      an active flag beyond what is scored.
    * v0: initial release.
    """

    env_id = "clbench/SpectrumMonitor-v1"
    reward_unit = "IoU"
    brief = (
        "You monitor a radio band (340-508 MHz) from a sequence of noisy scans. After each scan, report every "
        "transmitter that is transmitting in it: its centre frequency and bandwidth in MHz. Peaks "
        "can be missed, their centres and widths are noisy, and false alarms and short interference spikes occur "
        "that look like transmitters in a single scan. Licensed channels recur across scans; the band plan may "
        "change. You are scored on how well your reported bands cover the spectrum occupied in this scan "
        "(intersection over union in MHz); claiming unoccupied spectrum costs score. Only the bands count: "
        "a transmitter marked currently_active false is ignored, and estimated_power_dbm is optional and not "
        "scored. One report ends the scan; if it is invalid you are told why and get one more try, after which "
        "the scan scores 0."
    )
    reward_text = ("IoU (MHz) between the reported active transmitters' bands and the spectrum occupied by the "
                   "channels transmitting in this scan; 1.0 is perfect.")
    feedback_text = (
        "After the report: the IoU and its parts (MHz occupied, reported, overlap, union), for each reported "
        "transmitter (first 20) the MHz that overlapped spectrum in use or 'false alarm', and the number of "
        "transmitting channels no reported band touched. The channels' true centres and edges are not shown: "
        "they would answer later scans and give away the band plan.")
    action_grammar = (
        'Reply with JSON: {"transmitters": [{"center_mhz": 352.0, "bandwidth_mhz": 15.0, '
        '"currently_active": true, "estimated_power_dbm": -70.0}, ...]} '
        '(currently_active defaults to true; estimated_power_dbm is optional and not scored; '
        'or the tool call {"tool": "submit_report", "arguments": {"transmitters": [...]}}).'
    )
    max_invalid_repeats = 2
    #: fixed replies that ignore the scan (clbench.agents.degenerate): the whole band, the nominal
    #: 13-channel plan of the published grid, and nothing
    degenerate_answers = {
        "everything": json.dumps({"transmitters": [{"center_mhz": 424.0, "bandwidth_mhz": 168.0}]}),
        "plan": json.dumps({"transmitters": [{"center_mhz": 352.0 + 24 * i, "bandwidth_mhz": 15.0} for i in range(7)]
                            + [{"center_mhz": 364.0 + 24 * i, "bandwidth_mhz": 5.0} for i in range(6)]}),
        "nothing": json.dumps({"transmitters": []}),
    }
    agents = {
        "reference": "clbench.agents.spectrummonitor:SpectrumReference",
        "oracle": "clbench.agents.spectrummonitor:SpectrumOracle",
    }

    def __init__(self, schedule: str = "default", cycle: bool = False, render_mode: str | None = None,
                 split: str = "test"):
        super().__init__(schedule=schedule, cycle=cycle, render_mode=render_mode, split=split)
        band = self.spec_data["band"]
        self.low, self.high = float(band["low_mhz"]), float(band["high_mhz"])

    def _build_schedule(self, name: str) -> Schedule:
        if name not in self.spec_data["schedules"]:
            raise ValueError(f"unknown schedule {name!r}; known: {sorted(self.spec_data['schedules'])}")
        spec = {**self.spec_data, "seed": self.split_seed(self.spec_data["seed"])}  # train: another seed
        self.channels, scans = generate(spec, name)
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
            f"noise floor {self.spec_data['noise_floor_dbm']:.1f} dBm",
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
        """The score's parts and a verdict per reported band; the truth's edges stay hidden (Feedback)."""
        occupied = merge_intervals(truth, self.low, self.high)
        reported = merge_intervals(bands, self.low, self.high)
        inter = overlap(reported, occupied)
        union = measure(reported) + measure(occupied) - inter
        lines = ["Checked against the licensees' transmission log for this scan:"]
        for i, (a, b) in enumerate(bands[:VERDICTS]):
            hit = overlap(merge_intervals([(a, b)], self.low, self.high), occupied)
            verdict = f"{hit:.2f} MHz of it was in use (hit)" if hit > 0 else "nothing was transmitting there (false alarm)"
            lines.append(f"  reported {(a + b) / 2:.2f} MHz, {b - a:.2f} MHz wide: {verdict}")
        if len(bands) > VERDICTS:
            lines.append(f"  ({len(bands) - VERDICTS} more reported transmitters: no verdict beyond the first {VERDICTS})")
        missed = sum(1 for c in truth if overlap(reported, merge_intervals([c], self.low, self.high)) == 0)
        lines.append(f"Transmitting channels that no reported band touched: {missed} of {len(truth)}.")
        return score_report(score, "IoU with the spectrum occupied in this scan", [
            ("occupied by transmitting channels", f"{measure(occupied):.2f} MHz"),
            ("reported as active", f"{measure(reported):.2f} MHz"),
            ("overlap", f"{inter:.2f} MHz"), ("union", f"{union:.2f} MHz (IoU = overlap / union)")], lines)

    def _on_invalid_cap(self) -> Outcome:
        return Outcome("No valid report after two tries; this scan scores 0.\n"
                       + score_report(0.0, "no valid report"), done=True, reward=0.0,
                       raw_metric=("iou", 0.0), solved=False)
