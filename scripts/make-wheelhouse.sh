#!/usr/bin/env bash
# Fill a wheelhouse so an image builds offline (`build.py ... --wheelhouse DIR --offline`):
# every requirement and its dependencies, as wheels for the container's Python, not the host's.
# Reuses DIR when an earlier run with the same arguments completed, so a second run downloads
# nothing; a run that starts while another fills DIR waits for it.
#   scripts/make-wheelhouse.sh DIR PYTHON_VERSION REQUIREMENT...
#   e.g. scripts/make-wheelhouse.sh .cache/wheelhouse-cu121 3.11.2 torch==2.3.1 torchvision==0.18.1 numpy
# WHEEL_MACHINE=aarch64 fills it for linux/arm64 images instead (default x86_64).
set -euo pipefail
dir=${1:?usage: make-wheelhouse.sh DIR PYTHON_VERSION REQUIREMENT...}
python_version=${2:?usage: make-wheelhouse.sh DIR PYTHON_VERSION REQUIREMENT...}
shift 2
[ $# -gt 0 ] || { echo "make-wheelhouse.sh: no requirements given" >&2; exit 2; }
abi="cp$(echo "${python_version}" | cut -d. -f1-2 | tr -d .)"
machine=${WHEEL_MACHINE:-x86_64}
case "${machine}" in x86_64|aarch64) ;; *) echo "make-wheelhouse.sh: WHEEL_MACHINE must be x86_64 or aarch64" >&2; exit 2 ;; esac
# Every manylinux tag the container's glibc (Debian bookworm: 2.36) runs, as pip would accept inside it: a list of
# only some (2_28 and 2_17) misses wheels tagged in between, e.g. nvidia-nccl-cu13's manylinux_2_18.
platforms=()
for minor in $(seq 36 -1 5); do platforms+=(--platform "manylinux_2_${minor}_${machine}"); done
platforms+=(--platform "manylinux2014_${machine}")
[ "${machine}" = x86_64 ] && platforms+=(--platform manylinux2010_x86_64 --platform manylinux1_x86_64)
mkdir -p "${dir}"
# One fill at a time per folder: a second run (two sessions, or a session and setup) waits for the first, then
# finds its marker.
exec 9> "${dir}/.lock"
flock 9
marker="${dir}/.complete-$(printf '%s\n' "${python_version}" "$@" | sha256sum | cut -c1-16)"
[ "${machine}" = x86_64 ] || marker="${marker}-${machine}"
if [ -f "${marker}" ]; then
    echo "wheelhouse: ${dir} is complete for $*; reusing it"
    exit 0
fi
echo "wheelhouse: downloading $* for Python ${python_version} (${machine}) into ${dir}"
started=$(date +%s)
python3 -m pip download --quiet --disable-pip-version-check --progress-bar off -d "${dir}" --only-binary=:all: \
    --python-version "${python_version}" --implementation cp --abi "${abi}" \
    "${platforms[@]}" --platform any \
    "$@" 2> >(grep -v "is ignored" >&2)
touch "${marker}"
echo "wheelhouse: ${dir}: $(ls "${dir}"/*.whl | wc -l) wheels, $(du -sh "${dir}" | cut -f1), $(( $(date +%s) - started )) s"
