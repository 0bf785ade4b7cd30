#!/usr/bin/env bash
# Make a Debian bookworm base image from Debian's mirror with debootstrap and `docker import`,
# for machines that reach no container registry. Reuses the image when present: a re-import
# gets a new ID and would invalidate every cached layer built on it.
#   scripts/make-base-image.sh [IMAGE]     (default torchimages/debian:bookworm-minbase)
set -euo pipefail
image=${1:-torchimages/debian:bookworm-minbase}
if docker image inspect "${image}" > /dev/null 2>&1; then
    echo "base image: ${image} exists; reusing it"
    exit 0
fi
mirror=${DEBIAN_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2> /dev/null || true)}
mirror=${mirror:-http://deb.debian.org/debian}
if ! command -v debootstrap > /dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap > /dev/null
fi
root=$(mktemp -d)
trap 'rm -rf "${root}"' EXIT
echo "base image: debootstrap bookworm from ${mirror}"
debootstrap --variant=minbase bookworm "${root}" "${mirror}" > /tmp/debootstrap.log 2>&1 \
    || { echo "base image: FAILED: debootstrap; see /tmp/debootstrap.log" >&2; tail -20 /tmp/debootstrap.log >&2; exit 1; }
cat > "${root}/etc/apt/sources.list" << SOURCES
deb ${mirror} bookworm main
deb ${mirror} bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
SOURCES
rm -rf "${root}"/var/lib/apt/lists/* "${root}"/var/cache/apt/*.bin "${root}"/var/cache/apt/archives/*.deb "${root}"/usr/share/doc/* "${root}"/usr/share/man/*
tar -C "${root}" -c . | docker import -c 'CMD ["/bin/bash"]' - "${image}" > /dev/null
echo "base image: ${image} made ($(docker image inspect -f '{{.Size}}' "${image}") bytes)"
