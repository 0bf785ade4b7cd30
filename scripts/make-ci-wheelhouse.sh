#!/usr/bin/env bash
# Fill a wheelhouse for the CI image (torch CPU build, Python 3.11, both variants) so it builds
# offline: torch from the wheel this machine's pip finds locally, the rest from the package index.
# Wheels are resolved for the container's Python (Debian bookworm: 3.11.2), not the host's.
#   scripts/make-ci-wheelhouse.sh DIR [TORCH_VERSION] [JUPYTERLAB_VERSION]
set -euo pipefail
dir=${1:?usage: make-ci-wheelhouse.sh DIR [TORCH_VERSION] [JUPYTERLAB_VERSION]}
torch=${2:-2.13.0}
jupyterlab=${3:-4.6.6}
mkdir -p "${dir}"
if [ -f "${dir}/.complete-${torch}-${jupyterlab}" ]; then
    echo "wheelhouse: ${dir} is complete; reusing it"
    exit 0
fi
python3 -m pip download --quiet --disable-pip-version-check -d "${dir}" --only-binary=:all: \
    --python-version 3.11.2 --implementation cp --abi cp311 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any \
    "torch==${torch}+cpu" numpy "jupyterlab==${jupyterlab}" ipykernel 2> >(grep -v "is ignored" >&2)
touch "${dir}/.complete-${torch}-${jupyterlab}"
echo "wheelhouse: ${dir}: $(ls "${dir}"/*.whl | wc -l) wheels, $(du -sh "${dir}" | cut -f1)"
