#!/usr/bin/env bash
# Download the wheels `build.py selfcheck` needs beside torch (requirements-selfcheck.txt and what they depend on),
# for the GPU host's Python, so that host needs no network:
#   scripts/make-selfcheck-wheels.sh DIR PYTHON_VERSION      e.g. .cache/selfcheck-wheels 3.12
set -euo pipefail
dir=${1:?usage: make-selfcheck-wheels.sh DIR PYTHON_VERSION}
version=${2:?usage: make-selfcheck-wheels.sh DIR PYTHON_VERSION, the Python of the GPU host, e.g. 3.12}
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-${root}/.venv/bin/python}
# Pure-Python wheels only (pytest, testinfra and their dependencies have no compiled parts): any platform takes them.
"${python}" -m pip download --quiet --only-binary=:all: --python-version "${version}" -d "${dir}" \
    -r "${root}/requirements-selfcheck.txt"
echo "selfcheck wheels for Python ${version}: ${dir} ($(ls "${dir}" | wc -l) files)"
