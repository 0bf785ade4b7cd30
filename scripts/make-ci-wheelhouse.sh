#!/usr/bin/env bash
# Fill a wheelhouse for the CI image (torch CPU build, Python 3.11, both variants) so it builds
# offline: torch from the wheel this machine's pip finds locally, the rest from the package index.
# Wheels are resolved for the container's Python (Debian bookworm: 3.11.2), not the host's.
#   scripts/make-ci-wheelhouse.sh DIR [TORCH_VERSION] [JUPYTERLAB_VERSION] [NOTEBOOK_VERSION]
set -euo pipefail
dir=${1:?usage: make-ci-wheelhouse.sh DIR [TORCH_VERSION] [JUPYTERLAB_VERSION] [NOTEBOOK_VERSION]}
exec bash "$(dirname "$0")/make-wheelhouse.sh" "${dir}" 3.11.2 "torch==${2:-2.13.0}+cpu" numpy \
    "jupyterlab==${3:-4.6.6}" "notebook==${4:-7.6.5}" ipykernel
