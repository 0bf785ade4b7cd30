#!/usr/bin/env bash
# Prints whether the arm64 image's emulated work (single-core qemu: here its apt step) and the unit tests overlap on
# this machine's cores: each alone, then side by side. Measured here (2 cores, December 2026): apt 134 s and unit tests
# 97 s alone (231 s one after the other); side by side 147 s, 0.64x (apt 147 s, unit tests 104 s). Needs the arm64 CUDA
# stand-in base (scripts/make-cuda-base-image.sh, docs/building.md) and emulation (scripts/setup-emulation.sh).
#   bash benchmarks/emulated_overlap.sh
set -euo pipefail
cd "$(dirname "$0")/.."
base=${ARM64_BASE:-torchimages/cuda:13.0.3-base-debian12-arm64}
packages="g++ python3 python3-venv python3-dev libibverbs1 ibverbs-providers librdmacm1 tini procps ca-certificates"
apt_step() {
    docker run --rm --platform linux/arm64 "${base}" sh -c \
        "apt-get update -qq && apt-get install -y -qq --no-install-recommends ${packages} > /dev/null" 2> /dev/null
}
unit_tests() { .venv/bin/python -m pytest tests/unit -q -p no:cacheprovider > /dev/null 2>&1; }
timed() { local started; started=$(date +%s); "$@"; echo $(( $(date +%s) - started )); }
apt_alone=$(timed apt_step)
unit_alone=$(timed unit_tests)
started=$(date +%s)
apt_beside_file=$(mktemp)
( timed apt_step > "${apt_beside_file}" ) &
unit_beside=$(timed unit_tests)
wait
apt_beside=$(cat "${apt_beside_file}"); rm -f "${apt_beside_file}"
both=$(( $(date +%s) - started ))
echo "emulated apt step: ${apt_alone} s alone, ${apt_beside} s beside the unit tests"
echo "unit tests:        ${unit_alone} s alone, ${unit_beside} s beside the apt step"
echo "one after the other $(( apt_alone + unit_alone )) s; side by side ${both} s ($(awk -v a="${both}" -v b="$(( apt_alone + unit_alone ))" 'BEGIN { printf "%.2f", a / b }')x)"
