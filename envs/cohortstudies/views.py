"""Agent-visible text: the instance introduction, database metadata, data summary, KM tables."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from clbench.envs.cohortstudies.codings import fmt_num

if TYPE_CHECKING:
    import pandas as pd


def _num(x: float | None) -> str:
    return "NA" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.4f}"


def metadata_text(study, region: str, instance_id: str, n: int, sql_types: dict[str, str]) -> str:
    spec = study.spec
    t, e = study.time, study.event
    lines = [
        f"Study {study.name}: {spec['title']} (instance {instance_id})",
        f"Region: {region}",
        f"Design: {spec['design']}",
        f"Enrollment: {spec['enrollment']}",
        f"Follow-up: administrative end of follow-up after {spec['followup_months'][0]} to "
        f"{spec['followup_months'][1]} months (staggered enrollment), plus loss to follow-up.",
        f"Table: patients ({n} rows; the only table). Survival outcome used by estimate_survival_by_group: "
        f"time = {t['column']} ({t['unit']}), death when {e['column']} = {_literal(e['dead'])}.",
        "Columns (name | SQL type | description; a [standard: ...] tag states how a column relates to a "
        "standard variable):",
    ]
    for name, text in study.column_texts().items():
        lines.append(f"- {name} | {sql_types.get(name, '?')} | {text}")
    return "\n".join(lines)


def _literal(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return f"'{v}'" if isinstance(v, str) else str(v)


def summary_text(table: pd.DataFrame, overall: list[float | None], deaths: int, points) -> str:
    import pandas as pd  # only here: keeps the env module's import light

    lines = [f"patients: {len(table)} rows, {deaths} deaths observed.",
             "Overall Kaplan-Meier survival (the flat baseline): " + ", ".join(
                 f"S({p}) = {_num(s)}" for p, s in zip(points, overall)),
             "column | non-null | distinct | summary"]
    for name in table.columns:
        col = table[name]
        nn = int(col.notna().sum())
        distinct = int(col.nunique(dropna=True))
        values = col.dropna()
        if pd.api.types.is_bool_dtype(values) or not pd.api.types.is_numeric_dtype(values) or distinct <= 6:
            counts = values.astype(str).value_counts().sort_index()
            top = counts.sort_values(ascending=False, kind="stable").head(10)
            summary = ", ".join(f"{k}: {v}" for k, v in top.items())
            if distinct > 10:
                summary += f", ... ({distinct - 10} more values)"
        else:
            v = values.astype(float)
            q = np.percentile(v, [0, 25, 50, 75, 100])
            summary = (f"min {fmt_num(round(q[0], 4))}, p25 {fmt_num(round(q[1], 4))}, median {fmt_num(round(q[2], 4))}, "
                       f"p75 {fmt_num(round(q[3], 4))}, max {fmt_num(round(q[4], 4))}, mean {fmt_num(round(v.mean(), 4))}")
        lines.append(f"{name} | {nn} | {distinct} | {summary}")
    return "\n".join(lines)


def km_table(expression: str, groups: list[tuple[str, int, int, list]], left_out: int, points) -> str:
    header = "group | n | deaths | " + " | ".join(f"S({p})" for p in points)
    lines = [f"Expression: {expression}", header]
    for label, n, deaths, surv in groups:
        lines.append(f"{label} | {n} | {deaths} | " + " | ".join(_num(s) for s in surv))
    if not groups:
        lines.append("(no patient has a non-NULL group)")
    if left_out:
        lines.append(f"({left_out} patients with a NULL group left out)")
    return "\n".join(lines)
