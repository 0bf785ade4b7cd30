#!/usr/bin/env bash
# Make room on the engine's disk before the test session: remove what earlier sessions left behind
# (the images the tests tag, dangling layers, stopped containers, the build cache), keep the bases
# that setup made (torchimages/*: debootstrap and CUDA bases, slow to make again), then check that
# enough is free. A CI machine can start with an earlier session's engine state and only a few GB
# free; pushes then fail late with "no space left on device" instead of here, early and clearly.
#   usage: free-disk.sh [GB needed]   (default: TORCHIMAGES_TEST_DISK_GB or 50; a whole session here peaked at 48 GB)
set -euo pipefail
need_gb=${1:-${TORCHIMAGES_TEST_DISK_GB:-50}}
root=$(docker info --format '{{.DockerRootDir}}')
free_gb() { df -Pk "$1" | awk 'NR == 2 { printf "%d", $4 / 1048576 }'; }

echo "disk: ${root}: $(free_gb "${root}") GB free before; removing what earlier test sessions left"
# Tags the test suite makes: the matrix's registry and its test registries, probe and broken images.
leftover='^(registry\.example\.com/|127\.0\.0\.1:[0-9]+/|localhost/|torchimages-broken:|torchimages-test[:/])'
# An image pulled or pushed by digest has no tag: it goes by repository@digest.
mapfile -t tags < <(docker images --digests --format '{{.Repository}} {{.Tag}} {{.Digest}}' \
    | pattern=${leftover} awk '$1 ":" $2 ~ ENVIRON["pattern"] { print ($2 == "<none>") ? $1 "@" $3 : $1 ":" $2 }')
docker container prune -f > /dev/null
if [ "${#tags[@]}" -gt 0 ]; then
    docker rmi -f "${tags[@]}" > /dev/null
fi
docker image prune -f > /dev/null
docker builder prune -af > /dev/null 2>&1
rm -rf /tmp/ctx-* /tmp/pytest-of-"$(id -un)"

free=$(free_gb "${root}")
echo "disk: ${root}: ${free} GB free after (${#tags[@]} leftover tags removed)"
if [ "${free}" -lt "${need_gb}" ]; then
    echo "disk: FAILED: the test session needs about ${need_gb} GB free on ${root}, there are ${free} GB." >&2
    echo "disk: what is still there: docker system df; docker images" >&2
    docker system df >&2 || true
    exit 1
fi
