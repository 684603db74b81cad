"""Result files of the original CL-Bench v1.0 ("upstream"): conversion and scoring conventions.

Upstream layout: ``runs/<system>/<task>.json.gz`` (one gzip JSON document per task) and
``runs/<system>/manifest.json``. A task document holds ``summary.sequence_signature`` (the
canonical instance order), ``baseline_trace`` (the stateless pass: one outcome per instance in
canonical order, with one ``instance_traces`` entry per instance) and ``run_traces[k]`` (the k-th
stateful rollout; ``instance_index`` of an outcome is its position in that rollout). An outcome has
instance_id, instance_index, reward, raw_metric_name/value, metadata and cost_usd; per-step token
usage is in the traces' ``interactions``.

This package is the task-independent core. What is particular to one upstream task (its r_max and
reward unit, how its reward is read or rescored, how its variants are recovered, its published
per-task numbers) lives beside its clbench counterpart, in ``envs/<domain>/upstream.py``, as one
`UpstreamTask`; `mappings` finds those through the registry (a domain without the file has no
upstream counterpart) and takes the counterpart env id from the domain's REGISTRATIONS.

- `artifacts`: locating and reading the files; `convert`: one task document -> clbench records;
  `importer`: `import_upstream`, one run directory per system; `conventions`: `compute`;
  `paper`: facts about systems (display names, the reference system, paper Table 1).

Conversion (`import_upstream`) writes one clbench run directory per system: ``metadata.json`` (tasks'
r_max/r_reference, the upstream external references, display names) and ``results.jsonl`` with one
clbench record per instance per rollout (mode stateful/stateless, rollout, instance_id, position,
variant, reward, raw_metric, cost, tokens). Every record carries two rewards:

- ``upstream_reward``: the instance reward as upstream scored it (what the paper's numbers use;
  a task may re-derive it, as database_exploration does from the regret);
- ``reward``: clbench's scoring of the same outcome, which differs only for a task that rescores
  (cohort_studies: signed bits instead of the older clamped score); ``reward_source`` says which.

Variants are recovered per task by the task's rule. Each must be a contiguous block of the
canonical order, otherwise the task gets one variant ``all``; the rollouts, which upstream permutes
within variants, keep every recovered block in place (tested).

Upstream conventions (`compute`), which reproduce the paper (appendix B.4 per task, Table 1
aggregate). For task t of system s with K stateful rollouts of N instances, r the upstream reward:

    S_k = sum_i r_{k,i}                    per-rollout SUM of instance rewards
    cumulative reward = mean_k S_k  +- SE,  SE = stdev_k(S_k, ddof=1) / sqrt(K)
    B = sum_i r_bl,i                       the stateless baseline's sum
    cumulative gain   = mean_k S_k - B     (same SE: B is one number)
    normalized gain   = (mean_k S_k - B) / (N r_max - B)
    normalized reward = (mean_k S_k - E) / (N r_max - E),  E = icl-gpt-5.4's B on task t
    aggregate         = unweighted mean over the six tasks (Table 1 prints it in percent)

with r_max per instance as published and E as published (`UpstreamTask.external`) where the
reference system's artifact is missing (exploitable_poker); that system's row of such a task then
comes from its manifest headline. The normalized numbers equal clbench's mean-based formulas,
because sums and means differ by the same factor N; what differs under clbench's conventions is the
scoring of a rescored task, bootstrap CIs instead of standard errors, gain curves paired by
instance id (`position_paired_cumulative_gain` gives the position-paired curve of the paper's
plots, which for permuted rollouts pairs different instances; its final value is the same), and
the stability/plasticity split (clbench.metrics).

The tables by task of the earlier single module (`R_MAX`, `COUNTERPARTS`, `PUBLISHED_TASKS`,
`PUBLISHED_EXTERNAL`, `VARIANT_RULES`) are still here, built from the mappings on first use.
"""
from __future__ import annotations

from clbench.upstream.artifacts import ENV_VAR, SOURCE_KIND, default_dir, read_artifact, read_manifest, system_dirs
from clbench.upstream.conventions import compute, compute_from, is_upstream_import, position_paired_cumulative_gain
from clbench.upstream.convert import clbench_reward, convert_task, describe_variants, recover_variants, upstream_reward
from clbench.upstream.importer import convert_system, import_upstream
from clbench.upstream import mappings
from clbench.upstream.mappings import MappingError, tasks, unit_of
from clbench.upstream.paper import DISPLAY_NAMES, PUBLISHED_AGGREGATE, REFERENCE_SYSTEM
from clbench.upstream.task import UpstreamTask

_TABLES = {"R_MAX": "r_max", "COUNTERPARTS": "counterparts", "PUBLISHED_TASKS": "published_tasks",
           "PUBLISHED_EXTERNAL": "published_external", "VARIANT_RULES": "variant_rules"}


def __getattr__(name: str):
    """The tables by task, built from the discovered mappings when first asked for (discovery
    imports every domain's upstream.py, which `import clbench.upstream` alone should not)."""
    if name in _TABLES:
        return getattr(mappings, _TABLES[name])()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["COUNTERPARTS", "DISPLAY_NAMES", "ENV_VAR", "MappingError", "PUBLISHED_AGGREGATE", "PUBLISHED_EXTERNAL",
           "PUBLISHED_TASKS", "REFERENCE_SYSTEM", "R_MAX", "SOURCE_KIND", "UpstreamTask", "VARIANT_RULES",
           "clbench_reward", "compute", "compute_from", "convert_system", "convert_task", "default_dir",
           "describe_variants", "import_upstream", "is_upstream_import", "position_paired_cumulative_gain",
           "read_artifact", "read_manifest", "recover_variants", "system_dirs", "tasks", "unit_of",
           "upstream_reward"]
