"""CLI subcommands, one module each (discovered by clbench.cli)."""
