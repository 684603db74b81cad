#!/usr/bin/env bash
# Build everything CodeRepair needs: verified sdists, the bubblewrap test venvs and the Docker
# images of containers/coderepair/Dockerfile (one per repository release). Arguments go to `clbench containers build`, e.g.
#   containers/build.sh --offline-base     (no container registry: base image from Debian packages)
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m clbench.cli containers build "$@"
