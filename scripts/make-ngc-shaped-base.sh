#!/usr/bin/env bash
# Make an NGC-shaped base image for tests on machines that cannot pull nvcr.io/nvidia/pytorch, from a cuda-flavor
# image this project built (torch and its CUDA libraries in /opt/venv, e.g. the cu121 entry's base image): torch is
# not installed again. The image is that one with its layers shared (no second copy of the 5 GB environment) and
# the NGC shape on top: torch in the system Python (`python` is python3; pip may install into it; torch's packages
# are linked into /usr/local/lib/python3.X/dist-packages, where NGC's are), no venv on PATH, root, no entrypoint,
# a user with UID 1000 (NGC's Ubuntu 24.04 has "ubuntu"), none of this project's own files, and the NGC
# environment the template and the suite read (NVIDIA_PYTORCH_VERSION, PYTORCH_VERSION, CUDNN_VERSION, NCCL_VERSION,
# TORCH_CUDA_ARCH_LIST).
# Unlike NGC, it is Debian (not Ubuntu) and its CUDA libraries are torch's wheels (not /usr/local/cuda).
# An existing IMAGE is reused only when it was made from this TORCH_IMAGE (its label says which).
#   scripts/make-ngc-shaped-base.sh IMAGE TORCH_IMAGE RELEASE
#   e.g. scripts/make-ngc-shaped-base.sh torchimages/ngc-shaped:test \
#            registry.example.com/ml/pytorch:it-torch2.3.1-cu121-cudnn8.9-py3.11 test
set -euo pipefail
usage="usage: make-ngc-shaped-base.sh IMAGE TORCH_IMAGE RELEASE"
image=${1:?${usage}}
from=${2:?${usage}}
release=${3:?${usage}}
made_from_label=io.torchimages.test.made-from
from_id=$(docker image inspect -f '{{.Id}}' "${from}" 2> /dev/null) || {
    echo "ngc-shaped base: FAILED: ${from} is missing (build the cu121 entry first)" >&2; exit 1; }
# The label names the image it was made from and this script's version: a changed script makes it again.
from_id="${from_id} $(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)"
if [ "$(docker image inspect -f "{{index .Config.Labels \"${made_from_label}\"}}" "${image}" 2> /dev/null)" = "${from_id}" ]; then
    echo "ngc-shaped base: ${image} exists, made from ${from}; reusing it"
    exit 0
fi
started=$(date +%s)
# The facts NGC states in its environment, read from the torch image's own environment first.
read -r version cudnn nccl < <(docker run --rm --entrypoint /opt/venv/bin/python "${from}" -c '
import importlib.metadata as m, torch
found = {d.metadata["Name"].lower(): d.version for d in m.distributions()}
pick = lambda prefix: next(v for n, v in sorted(found.items()) if n.startswith(prefix))
print(torch.__version__, pick("nvidia-cudnn-cu"), pick("nvidia-nccl-cu"))' 2> /dev/null) || {
    echo "ngc-shaped base: FAILED: ${from} has no torch with nvidia-cudnn-cu* and nvidia-nccl-cu* in /opt/venv" >&2; exit 1; }
[ -n "${nccl:-}" ] || { echo "ngc-shaped base: FAILED: could not read torch, cuDNN and NCCL from ${from}" >&2; exit 1; }
log=$(mktemp)
trap 'rm -f "${log}"' EXIT
# The classic builder (DOCKER_BUILDKIT=0) needs no buildx plugin and pulls nothing: FROM is local.
DOCKER_BUILDKIT=0 docker build --tag "${image}" --build-arg "FROM_IMAGE=${from}" --build-arg "FROM_ID=${from_id}" \
    --build-arg "RELEASE=${release}" --build-arg "VERSION=${version}" --build-arg "CUDNN=${cudnn}" \
    --build-arg "NCCL=${nccl}" - > "${log}" 2>&1 << 'DOCKERFILE' || {
ARG FROM_IMAGE
# hadolint ignore=DL3006
FROM ${FROM_IMAGE}
ARG FROM_ID
ARG RELEASE
ARG VERSION
ARG CUDNN
ARG NCCL
USER 0:0
# TORCH_CUDA_ARCH_LIST as NGC sets it: the value NGC 23.10's environment shows (NVIDIA_PYTORCH_VERSION=23.10, CUDA
# 12.2.2; an `env` dump in a public benchmark write-up, an indexed public copy). It is the GPU generations an NGC
# base claims, and the suite checks torch's kernels against it; this stand-in's cu121 torch covers every one.
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# PATH without the venv; what pointed into this project's files is emptied (an ENV cannot be removed).
ENV PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    VIRTUAL_ENV= \
    PIP_CONSTRAINT= \
    NVIDIA_PYTORCH_VERSION=${RELEASE} \
    PYTORCH_VERSION=${VERSION} \
    PYTORCH_BUILD_VERSION=${VERSION} \
    CUDNN_VERSION=${CUDNN} \
    NCCL_VERSION=${NCCL} \
    TORCH_CUDA_ARCH_LIST="5.2 6.0 6.1 7.0 7.2 7.5 8.0 8.6 8.7 9.0+PTX" \
    PYTHONIOENCODING=utf-8
RUN set -eux; \
    export DEBIAN_FRONTEND=noninteractive; \
    apt-get update -q; \
    apt-get install -y -q --no-install-recommends python3-pip python-is-python3; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb /usr/lib/python3*/EXTERNALLY-MANAGED; \
    rm -rf /etc/pip/torchimages-constraints.txt /etc/torchimages /usr/local/bin/image-doctor \
        /usr/local/bin/torchimages-entrypoint /workspace; \
    usermod --login ubuntu --move-home --home /home/ubuntu "$(getent passwd 1000 | cut -d: -f1)"; \
    groupmod --new-name ubuntu "$(getent group 1000 | cut -d: -f1)"; \
    venv=$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))'); \
    system=$(python -c 'import site; print(site.getsitepackages()[0])'); \
    mkdir -p "${system}"; \
    for entry in "${venv}"/*; do \
        case "${entry##*/}" in \
            pip|pip-*|setuptools|setuptools-*|pkg_resources|_distutils_hack|*.pth|__pycache__) ;; \
            *) ln -s "${entry}" "${system}/" ;; \
        esac; \
    done; \
    cd /; \
    python -c 'import sys, torch; print(torch.__version__, torch.__file__); \
sys.exit(0 if torch.__file__.startswith(sys.argv[1]) else "torch is not in the system Python")' "${system}"; \
    python -m pip list --format=freeze | grep -E '^(torch|nvidia-cudnn-cu[0-9]+|nvidia-nccl-cu[0-9]+)=='
WORKDIR /
ENTRYPOINT []
CMD ["/bin/bash"]
LABEL org.opencontainers.image.title="NGC-shaped base for tests (torch ${VERSION}, release ${RELEASE})" \
      io.torchimages.test.made-from="${FROM_ID}"
DOCKERFILE
    echo "ngc-shaped base: FAILED; last lines:" >&2; tail -20 "${log}" >&2; exit 1; }
echo "ngc-shaped base: ${image} made FROM ${from} (its layers shared): torch ${version}, cuDNN ${cudnn}," \
     "NCCL ${nccl}, $(( $(date +%s) - started )) s"
