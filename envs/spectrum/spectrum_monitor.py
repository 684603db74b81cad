"""SpectrumMonitor-v0: blind spectrum monitoring from noisy scans."""
from __future__ import annotations

import json

from clbench.actions import ActionError, ToolCall, extract_json, tool_schema
from clbench.env import InstanceSequenceEnv, Outcome
from clbench.schedule import Instance, Schedule, Slot, Variant
from clbench.envs.spectrum.generator import generate, iou

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
    An analyst keeps a running map of the occupied channels in a 168 MHz band (340-508 MHz)
    from a sequence of 90 noisy scans. The latent structure is a fixed set of 13 channels:
    7 wideband (~15 MHz) on a regular grid and 6 narrowband (~5 MHz) in the guard gaps.
    Transmitters are active or dormant for long runs, so a channel seen once must be carried
    forward through silence. Three variants of 30 scans: five wideband channels dominate;
    four narrowband channels start to appear; the full grid is active. Each scan lists the
    detected peaks with centre jitter, width error, missed detections, false alarms and short
    interference spikes above a stated noise floor.

    ## Action Space
    `Text`: a JSON report `{"transmitters": [{"center_mhz": float, "bandwidth_mhz": float,
    "currently_active": bool, "estimated_power_dbm": float}, ...]}` (bare, fenced or inside
    prose), or the tool call `{"tool": "submit_report", "arguments": {"transmitters": [...]}}`.

    ## Observation Space
    `Text` (printable ASCII): scan number, band, noise floor and the table of detected peaks
    (id, centre MHz, power dBm, width MHz); after the report, its score.

    ## Rewards
    Intersection over union, in MHz, between the union of the reported transmitters' bands
    and the true occupied spectrum (the union of all 13 channels, active or dormant), on the
    step that ends the scan; 0 on other steps. raw_metric = ("iou", value). r_max = 1.0 (the
    oracle's score); r_reference = the stateless reference agent's mean.

    ## Episode End
    One episode is one scan. It terminates when a valid report is submitted. An invalid report
    (not JSON, wrong fields, out-of-band values) returns an error and costs a step; the budget
    is 2 steps, so it allows one more try, after which the scan scores 0 (truncated).

    ## Arguments
    `schedule` ("default": 90 scans in 3 variants; "short": 8 scans for quick tests), `cycle`
    (wrap around after the last scan instead of raising), `render_mode` ("ansi").

    ## Version History
    * v0: initial release.
    """

    env_id = "clbench/SpectrumMonitor-v0"
    task = "spectrum"
    domain = "spectrum"
    brief = (
        "You monitor a radio band (340-508 MHz) from a sequence of noisy scans. After each scan, report every "
        "transmitter you believe occupies the band: its centre frequency and bandwidth in MHz, whether it is "
        "transmitting now and its power. Transmitters can be silent for long stretches; peaks can be missed, "
        "and false alarms and short interference spikes occur. You are scored on how well your reported bands "
        "cover the band's true occupied spectrum (intersection over union in MHz)."
    )
    reward_text = "IoU (MHz) between the reported occupied spectrum and the true union of all channels; 1.0 is perfect."
    action_grammar = (
        'Reply with JSON: {"transmitters": [{"center_mhz": 352.0, "bandwidth_mhz": 15.0, '
        '"currently_active": true, "estimated_power_dbm": -70.0}, ...]} '
        '(or the tool call {"tool": "submit_report", "arguments": {"transmitters": [...]}}).'
    )
    max_steps = 2
    max_invalid_repeats = 2
    agents = {
        "reference": "clbench.agents.spectrum:SpectrumReference",
        "oracle": "clbench.agents.spectrum:SpectrumOracle",
    }

    def __init__(self, schedule: str = "default", cycle: bool = False, render_mode: str | None = None):
        super().__init__(schedule=schedule, cycle=cycle, render_mode=render_mode)
        band = self.spec_data["band"]
        self.low, self.high = float(band["low_mhz"]), float(band["high_mhz"])
        self._truth = [c.interval for c in self.channels]

    def _build_schedule(self, name: str) -> Schedule:
        if name not in self.spec_data["schedules"]:
            raise ValueError(f"unknown schedule {name!r}; known: {sorted(self.spec_data['schedules'])}")
        self.channels, scans = generate(self.spec_data, name)
        variants = []
        for v in self.spec_data["schedules"][name]:
            insts = tuple(Instance(f"scan-{s.index + 1:03d}", v["name"], s) for s in scans if s.variant == v["name"])
            variants.append(Variant(v["name"], insts, v.get("description", "")))
        return Schedule(name, variants)

    @property
    def tools(self) -> list[dict]:
        return [tool_schema(
            "submit_report", "Submit the list of transmitters you believe occupy the band.",
            {"transmitters": {"type": "array", "items": _TRANSMITTER, "maxItems": 200}})]

    def latent(self) -> dict:
        return {"channels": [c.__dict__.copy() for c in self.channels], "band": (self.low, self.high)}

    def _enter(self, slot: Slot, fresh: bool) -> str:
        scan = slot.instance.payload
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
            bands.append((c - w / 2, c + w / 2))
        score = iou(bands, self._truth, self.low, self.high)
        obs = f"Report received: {len(bands)} transmitters. Score (IoU with the occupied spectrum): {score:.3f}"
        return Outcome(obs, done=True, reward=score, raw_metric=("iou", score), solved=score >= 0.9)

    def _on_invalid_cap(self) -> Outcome:
        return Outcome("No valid report after two tries; this scan scores 0.", done=True, reward=0.0,
                       raw_metric=("iou", 0.0), solved=False)
