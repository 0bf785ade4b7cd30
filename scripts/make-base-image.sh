#!/usr/bin/env bash
# Make a Debian bookworm base image from Debian's mirror with debootstrap and `docker import`,
# for machines that reach no container registry. Reuses the image when present: a re-import
# gets a new ID and would invalidate every cached layer built on it.
#   scripts/make-base-image.sh [IMAGE] [ARCH]     (default torchimages/debian:bookworm-minbase, amd64)
#   e.g. scripts/make-base-image.sh torchimages/debian:bookworm-minbase-arm64 arm64
# ARCH other than the machine's own runs debootstrap's second stage under emulation (scripts/setup-emulation.sh),
# and the image's configuration is given its real architecture: docker 20.10's import labels every rootfs amd64.
set -euo pipefail
image=${1:-torchimages/debian:bookworm-minbase}
arch=${2:-amd64}
if docker image inspect "${image}" > /dev/null 2>&1; then
    echo "base image: ${image} exists; reusing it"
    exit 0
fi
# The test session's second engine (tests/session/lanes.py) copies the first engine's, the same image (save and load keep
# its ID), instead of a debootstrap of minutes.
first=${TORCHIMAGES_FIRST_ENGINE:-}
if [ -n "${first}" ] && [ "${first}" != "${DOCKER_HOST:-}" ] && DOCKER_HOST=${first} docker image inspect "${image}" > /dev/null 2>&1; then
    DOCKER_HOST=${first} docker save "${image}" | docker load > /dev/null
    echo "base image: ${image} copied from the engine at ${first}"
    exit 0
fi
mirror=${DEBIAN_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2> /dev/null || true)}
mirror=${mirror:-http://deb.debian.org/debian}
if ! command -v debootstrap > /dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap > /dev/null
fi
if [ "${arch}" != "$(dpkg --print-architecture)" ] && [ "${arch}" = arm64 ] \
        && ! grep -qs '^flags: .*F' /proc/sys/fs/binfmt_misc/qemu-aarch64; then
    echo "base image: FAILED: ${arch} binaries do not run here; run scripts/setup-emulation.sh first" >&2
    exit 1
fi
root=$(mktemp -d)
trap 'rm -rf "${root}"' EXIT
echo "base image: debootstrap bookworm (${arch}) from ${mirror}"
started=$(date +%s)
debootstrap --arch="${arch}" --variant=minbase bookworm "${root}" "${mirror}" > /tmp/debootstrap.log 2>&1 \
    || { echo "base image: FAILED: debootstrap; see /tmp/debootstrap.log" >&2; tail -20 /tmp/debootstrap.log >&2; exit 1; }
cat > "${root}/etc/apt/sources.list" << SOURCES
deb ${mirror} bookworm main
deb ${mirror} bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
SOURCES
rm -rf "${root}"/var/lib/apt/lists/* "${root}"/var/cache/apt/*.bin "${root}"/var/cache/apt/archives/*.deb "${root}"/usr/share/doc/* "${root}"/usr/share/man/*
imported=$(tar -C "${root}" -c . | docker import -c 'CMD ["/bin/bash"]' -)
if [ "$(docker image inspect -f '{{.Architecture}}' "${imported}")" != "${arch}" ]; then
    # The configuration written again with the real architecture, through save and load (a new image ID).
    python3 "$(dirname "$0")/set-image-arch.py" "${imported}" "${arch}" "${image}"
    docker image rm "${imported}" > /dev/null
else
    docker tag "${imported}" "${image}"
fi
echo "base image: ${image} made ($(docker image inspect -f '{{.Os}}/{{.Architecture}}, {{.Size}}' "${image}") bytes)" \
     "in $(( $(date +%s) - started )) s"
