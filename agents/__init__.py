"""Agent implementations; installed as clbench.agents."""
