#!/usr/bin/env bash
# System services the tests need, for .ci/run (idempotent; quick when everything is in place):
#   - bubblewrap, docker.io and debootstrap from Debian packages,
#   - dockerd without bridge or iptables (the sandboxes use no network), started in the
#     background and waited for,
#   - CodeRepair's runtimes: verified sdists, the bubblewrap test venvs, the offline base image
#     (debootstrap + docker import) and the per-repository images (`clbench containers build`).
# Without root (a user's machine) nothing is installed or started: tests that need a missing
# piece skip with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[system-setup] $*"; }

if [ "$(id -u)" != 0 ]; then
    log "not root: skipping package installs and dockerd"
else
    missing=()
    command -v bwrap >/dev/null || missing+=(bubblewrap)
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    command -v chromium >/dev/null || missing+=(chromium)  # screenshots of the HTML report (tests/test_report_view.py)
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
    if ! docker info >/dev/null 2>&1; then
        log "starting dockerd (no bridge, no iptables)"
        nohup dockerd --bridge=none --iptables=false >/var/log/clbench-dockerd.log 2>&1 &
        for _ in $(seq 1 60); do
            docker info >/dev/null 2>&1 && break
            sleep 1
        done
        docker info >/dev/null 2>&1 || { log "dockerd did not answer; see /var/log/clbench-dockerd.log"; tail -20 /var/log/clbench-dockerd.log || true; }
    fi
fi

# The official MCP Inspector CLI, a second real client for `clbench serve` (tests/test_mcp.py)
if command -v npm >/dev/null && [ ! -x /opt/mcp-inspector/node_modules/.bin/mcp-inspector ] && [ -w /opt ]; then
    log "installing the MCP Inspector CLI (npm) into /opt/mcp-inspector"
    npm install --silent --prefix /opt/mcp-inspector "@modelcontextprotocol/inspector@^2" >/dev/null 2>&1 \
        || log "npm could not install the MCP Inspector; its test skips with the reason"
fi

# The build imports clbench; .ci/run installs it again with the test extras afterwards.
python -m pip install -q -e . --no-deps

build_args=()
if docker info >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] && command -v debootstrap >/dev/null && build_args+=(--offline-base)
else
    build_args+=(--skip-docker)
fi
log "clbench containers build ${build_args[*]:-}"
python -m clbench.cli containers build "${build_args[@]}"
