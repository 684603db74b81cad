"""Scripted agents for SpectrumMonitor-v2.

`SpectrumReference` reads the peak table of each scan. Stateful, it clusters detections across
scans (a peak joins the cluster whose centre is within a tolerance that scales with the widths
and whose width is alike) and so learns the band plan: a cluster seen in at least
`min_detections` and `min_share` of the last `horizon` scans is a channel, placed at the median
of its last `window` detections (recent ones, so a re-tuned channel is followed). It reports
each peak that matches a channel at the channel's learned centre and width; a peak that matches
none is echoed during the first `warmup` scans and afterwards dropped (false alarms, spikes, and
a new channel until it recurs). Stateless (a fresh agent per scan) it knows no channel and plays
the best single-scan rule found on the canonical world (`policy_families` in the env,
agents/spectrummonitor_redteam.py; in fresh worlds plain echoing is as good or slightly better):
echo every peak except narrow spikes (narrower than `spike_width` MHz) and peaks overlapping a
stronger one by more than `overlap_slack` (channels of a plan do not overlap; a look-alike false
alarm often does). `freeze_at=K` stops learning from rollout position K on (the
clusters keep what was learned before K), which measures what the band re-plan costs.

`SpectrumOracle` reads the channels transmitting in each scan and reports them exactly.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from statistics import median

from clbench.agent import Agent

_ROW = re.compile(r"^P\d+ \| ([\d.]+) \| (-?[\d.]+) \| ([\d.]+)$", re.MULTILINE)
#: (centre MHz, power dBm, width MHz) of detected peaks
Peaks = list[tuple[float, float, float]]


def parse_peaks(observation: str) -> Peaks:
    """(centre, power, width) of every peak row in a scan observation."""
    return [(float(c), float(p), float(w)) for c, p, w in _ROW.findall(observation)]


def drop_overlapping(peaks: Peaks, key: int = 1, slack: float = 0.0) -> Peaks:
    """Peaks, best first by field `key` (1 power, 2 width), each kept unless it overlaps a kept one by
    more than `slack` MHz."""
    kept: Peaks = []
    for p in sorted(peaks, key=lambda p: -p[key]):
        if all(abs(p[0] - q[0]) >= (p[2] + q[2]) / 2 - slack for q in kept):
            kept.append(p)
    return sorted(kept)


def report(transmitters: list[dict]) -> str:
    return json.dumps({"transmitters": transmitters})


def transmitter(center: float, width: float, power: float) -> dict:
    return {"center_mhz": round(center, 3), "bandwidth_mhz": round(width, 3), "currently_active": True,
            "estimated_power_dbm": round(power, 1)}


@dataclass
class Cluster:
    """Detections of one (putative) channel: (scan number, centre, width, power)."""

    seen: list[tuple[int, float, float, float]] = field(default_factory=list)

    #: detections the estimates are taken from (the most recent ones, so a re-tuned channel is followed)
    window = 15

    def _median(self, k: int) -> float:
        return median(d[k] for d in self.seen[-self.window:])

    @property
    def center(self) -> float:
        return self._median(1)

    @property
    def width(self) -> float:
        return self._median(2)

    @property
    def power(self) -> float:
        return self._median(3)

    def recent(self, since: int) -> int:
        return sum(d[0] > since for d in self.seen)


class SpectrumReference(Agent):
    name = "reference"
    deterministic = True  # plays from its observations only: one stateless pass measures it

    #: a cluster is a channel when seen in at least this many, and this share, of the recent scans
    min_detections = 3
    min_share = 0.15
    #: scans that count as recent
    horizon = 24
    #: scans before a peak that matches no known channel is taken for a false alarm
    warmup = 3
    #: peaks narrower than this (MHz) are interference spikes, not channels
    spike_width = 2.0
    #: overlap (MHz) two peaks may show and both be kept: measured edges are noisy
    overlap_slack = 1.0

    def __init__(self, card, seed: int = 0, latent=None, freeze_at: int | None = None):
        super().__init__(card, seed=seed)
        self.freeze_at = freeze_at
        self.clusters: list[Cluster] = []
        self.scans = 0

    @staticmethod
    def _match(center: float, width: float, clusters: list[Cluster]) -> Cluster | None:
        best, best_d = None, None
        for cl in clusters:
            d, w = abs(cl.center - center), cl.width
            if d <= max(2.0, 0.3 * min(width, w)) and 0.5 <= width / w <= 2.0 and (best_d is None or d < best_d):
                best, best_d = cl, d
        return best

    def _channels(self) -> list[Cluster]:
        since = self.scans - self.horizon
        need = max(self.min_detections, self.min_share * min(self.scans, self.horizon))
        return [cl for cl in self.clusters if cl.recent(since) >= need]

    def act(self, observation: str, info: dict) -> str:
        peaks = parse_peaks(observation)
        channels = self._channels()  # what was known before this scan
        if info.get("step", 0) == 0 and not self.frozen(info):
            self.scans += 1
            for center, power, width in peaks:
                cl = self._match(center, width, self.clusters)
                if cl is None:
                    cl = Cluster()
                    self.clusters.append(cl)
                cl.seen.append((self.scans, center, width, power))
        # a peak on a known channel is reported as that channel; any other peak is echoed while the
        # agent is still learning (always so when stateless) and dropped as a false alarm after
        known: dict[int, Cluster] = {}
        unknown = []
        for c, p, w in peaks:
            cl = self._match(c, w, channels)
            if cl is not None:
                known[id(cl)] = cl
            elif self.scans <= self.warmup and w >= self.spike_width:
                unknown.append((c, p, w))
        return report([transmitter(cl.center, cl.width, cl.power) for cl in known.values()]
                      + [transmitter(c, w, p) for c, p, w in drop_overlapping(unknown, slack=self.overlap_slack)])

    def state_dict(self) -> dict:
        return {"scans": self.scans, "clusters": [cl.seen for cl in self.clusters]}

    def load_state_dict(self, state: dict) -> None:
        self.scans = int(state["scans"])
        self.clusters = [Cluster([tuple(d) for d in seen]) for seen in state["clusters"]]


class SpectrumOracle(Agent):
    name = "oracle"
    deterministic = True  # plays from its observations only: one stateless pass measures it
    privileged = True

    def act(self, observation: str, info: dict) -> str:
        return report([transmitter(ch["center"], ch["width"], ch["power"])
                       for ch in self.latent["active"][info["instance_id"]]])
