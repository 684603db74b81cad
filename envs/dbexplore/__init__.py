"""Database exploration with schema drift: answer questions about an obfuscated DuckDB database."""

REGISTRATIONS = [
    {"id": "clbench/DBExplore-v3", "entry_point": "clbench.envs.dbexplore.dbexplore_env:DBExploreEnv"},
]
