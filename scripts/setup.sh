#!/usr/bin/env bash
# Set up a machine for building: the Python environment, a Docker engine, and, for machines that
# reach no container registry, a Debian base image and a wheelhouse for the CPU image.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== setup: virtual environment (.venv)"
python3 -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
echo "== setup: Docker engine"
bash scripts/start-engine.sh
echo "== setup: the test session's second engine (pytest -n 2: its side lane, tests/session/lanes.py)"
bash scripts/start-side-engine.sh
echo "== setup: the docker CLI's buildx plugin (--builder buildkit, as GitHub's runners build)"
bash scripts/install-buildx.sh
echo "== setup: Debian base image and CPU wheelhouse (for builds without a registry)"
bash scripts/make-base-image.sh
bash scripts/make-ci-wheelhouse.sh .cache/wheelhouse
echo "== setup: skopeo, the signature verifier the tests use (Debian trixie's, in a chroot: scripts/install-skopeo.sh)"
bash scripts/install-skopeo.sh > /dev/null
