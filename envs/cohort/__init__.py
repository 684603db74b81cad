"""Survival estimation across heterogeneous studies: report 36 cohorts' survival from biased,
differently coded studies of one latent population (see cohort_env.CohortStudiesEnv)."""

REGISTRATIONS = [
    {"id": "clbench/CohortStudies-v1", "entry_point": "clbench.envs.cohort.cohort_env:CohortStudiesEnv"},
]
