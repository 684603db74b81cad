"""Seeded generator of the band plan, transmitter activity and noisy scans.

All numbers come from tasks/spectrummonitor/default.yaml (the canonical world) or from
`draw_world` (any other world: the same kind of plan in another part of the spectrum, with other
widths, gaps, powers and re-plan). The band plan is the latent structure: wideband channels with
irregular guard gaps between them, each gap holding one narrowband channel. Which channels may
transmit changes by variant and, within a variant, follows a persistent on/off Markov process;
the truth of a scan is the set of channels transmitting in it. False alarms mimic channels
(the place, width and power of a channel of a plan drawn for the scan's band by the same process:
`false_alarm`), so a single scan cannot tell them apart.
A variant marked `replan` changes the plan for itself and every later variant: some eligible
wideband channels are re-tuned (new centre and width), one is retired and a new licensee takes
over part of the retired channel's spectrum with a different centre and width; the channels it
changes are on the air through the variant before it, the new plan's through the variant that brings
them. The plan, the channels each variant
allows and the re-plan come from `plan_seed`, the scans from `seed`. A drawn world's band has a
margin of the same kind at both ends, and the re-plan keeps every channel inside it.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Channel:
    name: str
    kind: str  # wideband | narrowband | licensee
    center: float
    width: float
    power: float

    @property
    def interval(self) -> tuple[float, float]:
        return (self.center - self.width / 2, self.center + self.width / 2)


@dataclass(frozen=True)
class Peak:
    center: float
    power: float
    width: float


@dataclass(frozen=True)
class Scan:
    index: int  # canonical scan number, 0-based
    variant: str
    active: tuple[Channel, ...]  # transmitting channels (ground truth)
    peaks: tuple[Peak, ...]


def _centers(wb: dict, high: float, rng: np.random.Generator) -> list[float]:
    """Wideband centres: the first one, then the gaps `gaps_mhz` (a drawn world's) or gaps drawn from
    spacing_mhz (irregular), squeezed to fit the band."""
    if "gaps_mhz" in wb:  # a drawn world's gaps fill its band as drawn
        gaps = np.array(wb["gaps_mhz"])
    else:
        gaps = rng.uniform(*wb["spacing_mhz"], size=wb["count"] - 1)
        room = high - wb["width_mhz"] / 2 - 1.0 - wb["first_center_mhz"]
        if gaps.sum() > room:
            gaps *= room / gaps.sum()
    return [float(wb["first_center_mhz"] + x) for x in np.concatenate([[0.0], np.cumsum(gaps)])]


def _channel_draws(spec: dict, rng: np.random.Generator, widths: bool = True,
                   powers: bool = True) -> tuple[list[float], list[tuple], list[tuple]]:
    """The plan's channel numbers in the order they are drawn: the wideband centres (`_centers`), then each wideband
    channel's (centre jitter, width jitter, power), then each narrowband channel's (one per guard gap). Without
    `widths` or `powers` those numbers are taken from the stream but not made (a plan a false alarm only borrows a
    centre from): `random()` takes the same one number `uniform` would, so what comes after is drawn alike."""
    wb, nb = spec["channels"]["wideband"], spec["channels"]["narrowband"]

    def uniform(low: float, high: float, made: bool) -> float:
        return rng.uniform(low, high) if made else rng.random()

    centers = _centers(wb, spec["band"]["high_mhz"], rng)
    wide = [(rng.normal(0, wb["center_jitter_mhz"] / 2),
             uniform(-wb["width_jitter_mhz"], wb["width_jitter_mhz"], widths), uniform(*wb["power_dbm"], powers))
            for _ in centers]
    narrow = [(rng.normal(0, nb["center_jitter_mhz"] / 2),
               uniform(-nb["width_jitter_mhz"], nb["width_jitter_mhz"], widths), uniform(*nb["power_dbm"], powers))
              for _ in centers[1:]]
    return centers, wide, narrow


def _wideband(spec: dict, i: int, center: float, draws: tuple) -> Channel:
    jitter, width, power = draws
    return Channel(f"W{i + 1}", "wideband", round(center + jitter, 3),
                   round(spec["channels"]["wideband"]["width_mhz"] + width, 3), round(power, 1))


def _narrowband(spec: dict, i: int, a: Channel, b: Channel, draws: tuple) -> Channel:
    """The narrowband channel in the guard gap between wideband channels `a` and `b`."""
    nb, (jitter, width, power) = spec["channels"]["narrowband"], draws
    lo, hi = a.interval[1], b.interval[0]
    center = (lo + hi) / 2 + jitter
    width = min(nb["width_mhz"] + width, 0.95 * (hi - lo))
    # inside the gap: the jitter never makes plan channels overlap
    center = min(max(center, lo + width / 2), hi - width / 2)
    return Channel(f"N{i + 1}", "narrowband", round(center, 3), round(width, 3), round(power, 1))


def make_channels(spec: dict, rng: np.random.Generator) -> list[Channel]:
    centers, wide_draws, narrow_draws = _channel_draws(spec, rng)
    wide = [_wideband(spec, i, c, d) for i, (c, d) in enumerate(zip(centers, wide_draws))]
    return wide + [_narrowband(spec, i, a, b, d) for i, (a, b, d) in enumerate(zip(wide, wide[1:], narrow_draws))]


#: a drawn world's band is this many spacings wide and its plan (margins and gaps) is scaled to fill it exactly, so
#: the band's edges tell the spacing and nothing more: a plan drawn for a given band (`draw_world(band=...)`) is a
#: draw from the same prior as the world's own, which is where false alarms are placed (`false_alarm`)
BAND_SPACINGS = 8.0


def draw_world(spec: dict, rng: np.random.Generator, band: tuple[float, float] | None = None) -> dict:
    """`spec` with the band plan and its re-plan drawn anew (same counts, same kind of plan, widths and
    shifts in the canonical world's proportions): the latent values of a non-canonical world. With `band`
    the plan is drawn for that band (the prior of plans given the band, which a single scan knows)."""
    wb, nb, rp = dict(spec["channels"]["wideband"]), dict(spec["channels"]["narrowband"]), dict(spec["replan"])
    lic = rp["licensee"] = dict(rp["licensee"])
    spec = {**spec, "channels": {**spec["channels"], "wideband": wb, "narrowband": nb}, "replan": rp}
    if band is None:
        low = round(float(rng.uniform(150.0, 850.0)), 1)
        width = round(BAND_SPACINGS * float(rng.uniform(19.0, 23.0)), 1)
        band = (low, round(low + width, 1))
    low, high = band
    # the canonical proportions: wideband width ~70% of the smallest gap, the narrowband channel ~80%
    # of the smallest guard, and a band wide enough for the widest draw of gaps, so plan channels
    # never overlap (a squeezed plan would make overlapping peaks a sign of a false alarm less often)
    spacing = (high - low) / BAND_SPACINGS
    wb["spacing_mhz"] = [round(spacing, 2), round(spacing + 6.0, 2)]
    wb["width_mhz"] = round(float(rng.uniform(0.68, 0.74)) * spacing, 2)
    nb["width_mhz"] = round(float(rng.uniform(0.75, 0.85)) * (spacing - wb["width_mhz"]), 2)
    # margins at either end and irregular gaps, scaled together to fill the band: an empty stretch at one end
    # only, or a band whose width told the plan's length, would tell a single scan where channels are not
    margins = rng.uniform(2.0, 7.0, size=2)
    gaps = rng.uniform(spacing, spacing + 6.0, size=wb["count"] - 1)
    fill = (high - low - wb["width_mhz"]) / (margins.sum() + gaps.sum())
    wb["first_center_mhz"] = round(low + fill * margins[0] + wb["width_mhz"] / 2, 2)
    wb["gaps_mhz"] = [round(float(g * fill), 3) for g in gaps]
    spec["band"] = {"low_mhz": low, "high_mhz": high}
    shift = float(rng.uniform(-3.0, 3.0))
    for kind in (wb, nb):
        kind["power_dbm"] = [round(p + shift, 1) for p in kind["power_dbm"]]
    lo = float(rng.uniform(3.5, 5.0))
    rp["retune_shift_mhz"] = [round(lo, 2), round(lo + 2.0, 2)]
    rp["retune_width_mhz"] = round(float(rng.uniform(0.6, 0.75)) * wb["width_mhz"], 2)
    lic["width_mhz"] = round(float(rng.uniform(0.45, 0.6)) * wb["width_mhz"], 2)
    off = float(rng.uniform(2.5, 3.5))
    lic["offset_mhz"] = [round(off, 2), round(off + 1.5, 2)]
    lic["power_dbm"] = [round(p + shift, 1) for p in lic["power_dbm"]]
    spec["plan_seed"] = int(rng.integers(2**31))  # the channels' jitter, the eligible sets and the re-plan
    spec["drawn"] = True  # its prior is draw_world's (`false_alarm`)
    return spec


def false_alarm(spec: dict, schedule: str, variant: int, kind: str, rng: np.random.Generator) -> tuple[float, str]:
    """Where a false alarm of `kind` in `variant` lies and whose look it takes: the centre of a channel of that
    kind allowed in that variant (after the re-plan, if it has come) of another plan drawn for the same band by
    the process this world's plan was drawn by (a drawn world's: `draw_world`; the canonical world's: its spec
    with another plan seed), and that channel's role ("wideband", "narrowband", "retuned" or "licensee": the
    width and power it takes are this world's for the role). So a false alarm and a detection are alike in
    place, width and power: a single scan says nothing of whether a peak is real; only recurrence does."""
    if spec.get("drawn"):
        ghost = draw_world(spec, rng, band=(spec["band"]["low_mhz"], spec["band"]["high_mhz"]))
    else:
        ghost = {**spec, "plan_seed": int(rng.integers(2**31))}
    return _borrowed(ghost, schedule, variant, kind, rng)


def _borrowed(ghost: dict, schedule: str, variant: int, kind: str, pick: np.random.Generator) -> tuple[float, str]:
    """`false_alarm`'s centre and role, from the plan `ghost` (its channel chosen with `pick`). The same numbers as
    `plan(ghost, schedule)` draws, but only the chosen channel is built, and only from what its centre depends on:
    the widths (but for a narrowband channel, whose guard gap they set) and powers are taken from the stream
    without being made, and the re-plan is drawn only when it can change the channel. A whole plan per false alarm
    (about 420 in the default schedule) made building an env ~2x slower: medians of 11 interleaved builds on 2
    busy cores, canonical 221 -> 106 ms, fresh world 3 259 -> 144 ms; one false alarm 655 -> 327 us."""
    rng = np.random.default_rng(ghost["plan_seed"])
    centers, wide_draws, narrow_draws = _channel_draws(ghost, rng, widths=kind == "narrowband", powers=False)
    variants = ghost["schedules"][schedule]
    allowed = _allowed(variants, len(centers), len(narrow_draws), rng)
    pool = allowed[variant][0 if kind == "wideband" else 1]
    i = int(pool[int(pick.integers(len(pool)))])

    def wide(j: int) -> Channel:
        return _wideband(ghost, j, centers[j], wide_draws[j])

    if kind == "narrowband":
        return _narrowband(ghost, i, wide(i), wide(i + 1), narrow_draws[i]).center, kind
    c, at = wide(i), next((k for k, v in enumerate(variants) if v.get("replan")), None)
    if at is None or variant < at:
        return c.center, kind
    picked = _replanned([wide(j) for j in allowed[at][0]], ghost, rng)
    # the successors are drawn in turn, up to c's: the numbers after it are never used
    new = next((new for p, new in zip(picked, _successors(picked, ghost, rng)) if p.name == c.name), None)
    if new is None:
        return c.center, kind
    return new.center, ("licensee" if new.kind == "licensee" else "retuned")


def _allowed(variants: list[dict], wide: int, narrow: int, rng: np.random.Generator) -> list[tuple[np.ndarray, ...]]:
    """Which wideband and which narrowband channels (indices into each kind's) each variant allows to transmit;
    later variants keep earlier ones."""
    wide_order, narrow_order = rng.permutation(wide), rng.permutation(narrow)
    return [(wide_order[: v["wideband_active"]], narrow_order[: v["narrowband_active"]]) for v in variants]


def _eligible(channels: list[Channel], variants: list[dict], rng: np.random.Generator) -> list[list[Channel]]:
    """Channels allowed to transmit in each variant (`_allowed`)."""
    wide = [c for c in channels if c.kind == "wideband"]
    narrow = [c for c in channels if c.kind == "narrowband"]
    return [[wide[i] for i in w] + [narrow[i] for i in n] for w, n in _allowed(variants, len(wide), len(narrow), rng)]


def _replan(eligible: list[Channel], spec: dict, rng: np.random.Generator) -> dict[str, Channel | None]:
    """The new plan: channel name -> its re-tuned channel, the licensee taking it over, or None (retired)."""
    picked = _replanned(eligible, spec, rng)
    return {c.name: new for c, new in zip(picked, _successors(picked, spec, rng))}


def _replanned(eligible: list[Channel], spec: dict, rng: np.random.Generator) -> list[Channel]:
    """The wideband channels the re-plan changes, in the order `_successors` draws theirs: the re-tuned ones, then
    the one it retires."""
    wide = [c for c in eligible if c.kind == "wideband"]
    return [wide[i] for i in rng.permutation(len(wide))[: spec["replan"]["retune"] + 1]]


def _successors(picked: list[Channel], spec: dict, rng: np.random.Generator) -> Iterator[Channel]:
    """The successor of each of `picked` in turn, drawn when asked for: each re-tuned channel, then the licensee
    taking over part of the last one's spectrum."""
    rp = spec["replan"]
    low, high = spec["band"]["low_mhz"], spec["band"]["high_mhz"]

    def inward(center: float, move: float, width: float) -> float:
        """`center + move`, or `center - move` when that would put the channel partly outside the band."""
        return move if low <= center + move - width / 2 and center + move + width / 2 <= high else -move

    for c in picked[:-1]:
        width = round(rp["retune_width_mhz"], 3)
        shift = inward(c.center, rng.uniform(*rp["retune_shift_mhz"]) * rng.choice([-1.0, 1.0]), width)
        yield replace(c, name=c.name + "r", center=round(c.center + shift, 3), width=width)
    retired, lic = picked[-1], rp["licensee"]
    offset = inward(retired.center, rng.uniform(*lic["offset_mhz"]) * rng.choice([-1.0, 1.0]), lic["width_mhz"])
    yield Channel("L1", "licensee", round(retired.center + offset, 3), round(lic["width_mhz"], 3),
                  round(rng.uniform(*lic["power_dbm"]), 1))


def plan(spec: dict, schedule: str) -> tuple[list[Channel], list[list[Channel]], dict[str, Channel | None]]:
    """The latent structure, from `plan_seed` alone: every channel of the first plan, the channels allowed
    to transmit in each variant of `schedule`, and the re-plan (channel name -> successor; empty when no
    variant re-plans)."""
    rng = np.random.default_rng(spec["plan_seed"])
    channels = make_channels(spec, rng)
    variants = spec["schedules"][schedule]
    eligible = _eligible(channels, variants, rng)
    at = next((i for i, v in enumerate(variants) if v.get("replan")), None)
    return channels, eligible, ({} if at is None else _replan(eligible[at], spec, rng))


def generate(spec: dict, schedule: str) -> tuple[list[Channel], list[Scan]]:
    """Every channel of every plan and every scan of `schedule`, in canonical order. The plan and re-plan
    come from `plan_seed` (`plan`), the scans (activity, detections, false alarms, spikes) from `seed`: a
    re-deal changes `seed` only and keeps the world."""
    channels, eligible, replan = plan(spec, schedule)
    rng = np.random.default_rng(spec["seed"])
    variants = spec["schedules"][schedule]
    act, meas = spec["activity"], spec["measurement"]
    low, high = spec["band"]["low_mhz"], spec["band"]["high_mhz"]
    wb, nb = spec["channels"]["wideband"], spec["channels"]["narrowband"]
    ghosts = np.random.default_rng([spec["seed"], 6])  # the plans false alarms are placed by (v6)
    rp = spec["replan"]
    looks = {"wideband": (wb["width_mhz"], wb["power_dbm"]), "narrowband": (nb["width_mhz"], nb["power_dbm"]),
             "retuned": (rp["retune_width_mhz"], wb["power_dbm"]),
             "licensee": (rp["licensee"]["width_mhz"], rp["licensee"]["power_dbm"])}  # a false alarm's width, power
    on = {c.name: bool(rng.random() < 0.6) for c in channels}
    changes: dict[str, Channel] = {}
    scans: list[Scan] = []
    # the channels the re-plan changes are on the air through the variant before it too, so what a stale plan
    # knows of them (and so what the re-plan costs it) does not depend on whether they happened to be dormant
    at = next((i for i, v in enumerate(variants) if v.get("replan")), None)
    for k, (v, allowed) in enumerate(zip(variants, eligible)):
        if v.get("replan") and not changes:
            changes = replan
            channels = channels + list(changes.values())
            # the new plan's channels are on the air through the variant that brings them (then follow the
            # on/off process like any other): what the re-plan costs a stale plan depends on the plan, not
            # on how long they happened to stay dormant
            on.update({name: True for name in changes})
        # a changed channel's successor inherits its on/off state (keyed by the original name)
        live = [changes.get(c.name, c) for c in allowed]
        on_air = set(changes) if v.get("replan") else set(replan) if at is not None and k == at - 1 else set()
        on.update({name: True for name in on_air})
        for _ in range(v["scans"]):
            for c in allowed:  # persistent on/off process
                if c.name in on_air:
                    continue
                flip = act["p_active_to_dormant"] if on[c.name] else act["p_dormant_to_active"]
                if rng.random() < flip:
                    on[c.name] = not on[c.name]
            active = [ch for c, ch in zip(allowed, live) if on[c.name]]
            if not active and live:  # a scan never shows an empty band in a live variant
                active = [live[int(rng.integers(len(live)))]]
            active.sort(key=lambda ch: ch.center)
            peaks = []
            for c in active:
                if rng.random() < meas["p_detect"]:
                    peaks.append(Peak(c.center + rng.normal(0, meas["center_noise_mhz"]),
                                      c.power + rng.normal(0, meas["power_noise_db"]),
                                      max(0.3, c.width * (1 + rng.normal(0, meas["width_noise_rel"])))))
            # look-alikes of each kind (its width and power, placed where the prior puts that kind's channels), as
            # many per allowed channel of that kind in every variant, so the share of a kind's peaks that are real
            # does not tell one week from another
            for kind, name in ((wb, "wideband"), (nb, "narrowband")):
                allowed_kind = sum(c.kind == name for c in allowed)
                for _ in range(rng.poisson(meas["false_alarms_per_channel"] * allowed_kind)):
                    center, role = false_alarm(spec, schedule, k, name, ghosts)
                    width, power = looks[role]
                    peaks.append(Peak(center + rng.normal(0, meas["center_noise_mhz"]),
                                      rng.uniform(*power) + rng.normal(0, meas["power_noise_db"]),
                                      max(0.3, width * (1 + rng.normal(0, meas["width_noise_rel"])))))
            if rng.random() < meas["spike_probability"]:
                peaks.append(Peak(rng.uniform(low, high), rng.uniform(*meas["spike_power_dbm"]),
                                  rng.uniform(*meas["spike_width_mhz"])))
            peaks = [Peak(round(p.center, 2), round(p.power, 1), round(p.width, 2)) for p in peaks
                     if low <= p.center <= high]
            peaks.sort(key=lambda p: p.center)
            scans.append(Scan(len(scans), v["name"], tuple(active), tuple(peaks)))
    return channels, scans


def merge_intervals(intervals, low: float, high: float) -> list[tuple[float, float]]:
    """Union of intervals clipped to [low, high], as sorted disjoint intervals."""
    clipped = sorted((max(low, a), min(high, b)) for a, b in intervals if min(high, b) > max(low, a))
    merged: list[list[float]] = []
    for a, b in clipped:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def measure(intervals: list[tuple[float, float]]) -> float:
    return float(sum(b - a for a, b in intervals))


def iou(reported, truth, low: float, high: float) -> float:
    """Intersection over union, in MHz, of two sets of frequency intervals."""
    a, b = merge_intervals(reported, low, high), merge_intervals(truth, low, high)
    inter = overlap(a, b)
    union = measure(a) + measure(b) - inter
    return inter / union if union > 0 else 0.0


def overlap(a, b) -> float:
    """MHz shared by two sorted lists of disjoint intervals (as `merge_intervals` returns them)."""
    inter, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        inter += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return inter
