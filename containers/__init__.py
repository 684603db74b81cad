"""Dockerfiles and build scripts of the sandboxed domains; installed as clbench.containers (package data)."""
