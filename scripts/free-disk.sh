#!/usr/bin/env bash
# Make room on the disks the test session writes to before it starts: remove what earlier sessions left behind
# (the images the tests tag, dangling layers, stopped containers, the build cache, pytest's folders), keep the
# bases that setup made (torchimages/*: debootstrap and CUDA bases, slow to make again), then check that every
# folder the tests write to has room for what a session was measured to hold there at its peak, plus a margin. A CI
# machine can start with an earlier session's engine state and only a few GB free; builds and pushes then fail late
# with "no space left on device" instead of here, early and clearly.
#   usage: free-disk.sh [GB needed in all]   (default: TORCHIMAGES_TEST_DISK_GB, else the measured peak + margin)
set -euo pipefail
cd "$(dirname "$0")/.."

# What a whole session (.ci/run on a fresh clone, 2 cores) held above its start at its peak, by where it writes:
# the last lines of every test run print these (tests/session/disk.py: "time and disk per test module"); update them
# when a change moves them. The shares are each folder's own peak; the folders do not peak together, so a
# filesystem that holds them all needs the session's peak, not their sum.
engine_gb=10      # the first engine (the main lane): the CPU entry's builds, then the cache and workflow modules
lane_gb=11        # the side engine (tests/session/lanes.py): the arm64, devel and CUDA/ngc modules, one at a time
current_gb=10     # the current engine (the current lane): the CPU release on the containerd store
temp_gb=5         # the temporary folder: pytest's folders (registry, reports, workflow checkouts), build contexts
cache_gb=1        # the checkout's .cache: the CPU wheelhouse, SBOMs, skopeo (CUDA-sized builds take PyPI's wheels)
session_gb=18     # the session's peak on one filesystem (two lanes): the devel build beside the first push's SBOM scans
margin_pct=15     # on top of the peak: the disk is shared, and a session's peak moves with what it builds

root=$(docker info --format '{{.DockerRootDir}}')
temp=${TMPDIR:-/tmp}
cache=${PWD}/.cache
mkdir -p "${cache}"
free_gb() { df -Pk "$1" | awk 'NR == 2 { printf "%d", $4 / 1048576 }'; }
device_of() { stat -c %d "$1"; }   # a bind mount (Docker's root often is one) is the same filesystem

echo "disk: ${root}: $(free_gb "${root}") GB free before; removing what earlier test sessions left"
# Tags the test suite makes: the matrix's registry and its test registries, probe and broken images.
leftover='^(registry\.example\.com/|127\.0\.0\.1:[0-9]+/|localhost/|torchimages-broken:|torchimages-test[:/]|torchimages/ngc-shaped:)'
# The engines of the test session: the first, the side lane's (scripts/start-side-engine.sh) and the current lane's
# (scripts/start-current-engine.sh).
lane_engine=${TORCHIMAGES_SIDE_ENGINE:-unix:///var/run/torchimages-side.sock}
current_engine=${TORCHIMAGES_CURRENT_ENGINE:-unix:///var/run/torchimages-current.sock}
removed=0
for engine in "${DOCKER_HOST:-unix:///var/run/docker.sock}" "${lane_engine}" "${current_engine}"; do
    DOCKER_HOST=${engine} docker version > /dev/null 2>&1 || continue
    # An image pulled or pushed by digest has no tag: it goes by repository@digest.
    mapfile -t tags < <(DOCKER_HOST=${engine} docker images --digests --format '{{.Repository}} {{.Tag}} {{.Digest}}' \
        | pattern=${leftover} awk '$1 ":" $2 ~ ENVIRON["pattern"] { print ($2 == "<none>") ? $1 "@" $3 : $1 ":" $2 }')
    DOCKER_HOST=${engine} docker container prune -f > /dev/null
    if [ "${#tags[@]}" -gt 0 ]; then
        DOCKER_HOST=${engine} docker rmi -f "${tags[@]}" > /dev/null
    fi
    DOCKER_HOST=${engine} docker image prune -f > /dev/null
    DOCKER_HOST=${engine} docker builder prune -af > /dev/null 2>&1
    removed=$(( removed + ${#tags[@]} ))
done
rm -rf "${temp}"/ctx-* "${temp}/pytest-of-$(id -un)"
echo "disk: ${removed} leftover tags removed"

# Each filesystem must hold the shares of the folders on it, plus the margin.
declare -A need_on=() folders_on=() path_on=()
share() {
    local device
    device=$(device_of "$1")
    need_on[${device}]=$(( ${need_on[${device}]:-0} + $2 ))
    folders_on[${device}]="${folders_on[${device}]:-}${folders_on[${device}]:+, }$1 (${2} GB)"
    path_on[${device}]=${path_on[${device}]:-$1}
}
# An engine of another lane counts where it answers: its data root, with its share.
share_root_of() {
    local engine_root
    engine_root=$(DOCKER_HOST=$1 docker info --format '{{.DockerRootDir}}' 2> /dev/null || true)
    if [ -n "${engine_root}" ] && [ -d "${engine_root}" ]; then share "${engine_root}" "$2"; fi
}
share "${root}" "${engine_gb}"
share_root_of "${lane_engine}" "${lane_gb}"
share_root_of "${current_engine}" "${current_gb}"
share "${temp}" "${temp_gb}"
share "${cache}" "${cache_gb}"
total_override=${1:-${TORCHIMAGES_TEST_DISK_GB:-}}
failed=0
for device in "${!need_on[@]}"; do
    [ "${need_on[${device}]}" -gt "${session_gb}" ] && need_on[${device}]=${session_gb}
    need=$(( (need_on[${device}] * (100 + margin_pct) + 99) / 100 ))
    [ -n "${total_override}" ] && need=${total_override}
    free=$(free_gb "${path_on[${device}]}")
    echo "disk: ${free} GB free on the filesystem of ${folders_on[${device}]}: the session needs ${need} GB there" \
         "(their measured peak, ${need_on[${device}]} GB, + ${margin_pct} %${total_override:+; overridden: ${total_override} GB})"
    if [ "${free}" -lt "${need}" ]; then
        echo "disk: FAILED: the test session needs about ${need} GB free on the filesystem of ${path_on[${device}]}," \
             "there are ${free} GB." >&2
        failed=1
    fi
done
echo "disk: a whole session was measured at ${session_gb} GB above its start at its peak"
if [ "${failed}" -ne 0 ]; then
    echo "disk: what is still there: docker system df" >&2
    docker system df >&2 || true
    exit 1
fi
