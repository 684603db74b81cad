#!/usr/bin/env bash
# Build a Docker base image from Debian packages only (debootstrap + docker import), for
# machines that reach a Debian mirror but no container registry. The image has python3
# (with venv and pip), git and patch; the repository images of containers/ build on it with
# `--build-arg BASE_IMAGE=<tag>` (what `clbench containers build --offline-base` does).
#
#   containers/make-offline-base.sh [TAG]      (root; needs debootstrap and a running dockerd)
#
# Environment: SUITE (default bookworm), MIRROR (default http://deb.debian.org/debian),
# FORCE=1 rebuilds an existing image.
set -euo pipefail

TAG="${1:-clbench/offline-base:bookworm}"
SUITE="${SUITE:-bookworm}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
PACKAGES="python3,python3-venv,python3-pip,git,patch,ca-certificates,procps,less"

if [ -z "${FORCE:-}" ] && docker image inspect "$TAG" >/dev/null 2>&1; then
    echo "offline base image $TAG exists (FORCE=1 to rebuild)"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "make-offline-base.sh must run as root (debootstrap needs it)" >&2
    exit 1
fi
command -v debootstrap >/dev/null || { echo "debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }

ROOTFS="$(mktemp -d /var/tmp/clbench-rootfs.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT

echo "debootstrap $SUITE from $MIRROR into $ROOTFS"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR"

# Keep the image small and free of host traces.
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/tmp/* \
    "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/*
echo "sandbox" > "$ROOTFS/etc/hostname"

tar --numeric-owner -C "$ROOTFS" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    - "$TAG"
echo "built $TAG"
