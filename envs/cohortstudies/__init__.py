"""Survival estimation across heterogeneous studies: report 36 cohorts' survival from biased,
differently coded studies of one latent population (see cohortstudies_env.CohortStudiesEnv)."""

REGISTRATIONS = [
    {"id": "clbench/CohortStudies-v4", "entry_point": "clbench.envs.cohortstudies.cohortstudies_env:CohortStudiesEnv"},
]
