"""Environment packages, one per domain; installed as clbench.envs.<domain>."""
