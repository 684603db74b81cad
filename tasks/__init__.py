"""Task data specs per domain (YAML/JSON), installed as package data of clbench.tasks."""
