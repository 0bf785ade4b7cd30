#!/usr/bin/env bash
# Make an NGC-shaped base image for tests on machines that cannot pull nvcr.io/nvidia/pytorch: the
# local CUDA base (scripts/make-cuda-base-image.sh) with torch and its CUDA libraries installed the
# way NGC ships them: into the system Python (no venv; `python` is python3; pip may install into it),
# and the NGC environment the template reads (NVIDIA_PYTORCH_VERSION, PYTORCH_VERSION, CUDNN_VERSION,
# NCCL_VERSION). torch comes from a wheelhouse mounted read-only, so no wheel stays in a layer.
# Unlike NGC, it is Debian (not Ubuntu) and its CUDA libraries are torch's wheels (not /usr/local/cuda).
#   scripts/make-ngc-shaped-base.sh IMAGE WHEELHOUSE RELEASE TORCH_VERSION [FROM_IMAGE]
#   e.g. scripts/make-ngc-shaped-base.sh torchimages/ngc-shaped:test .cache/wheelhouse-cu121 test 2.3.1
set -euo pipefail
usage="usage: make-ngc-shaped-base.sh IMAGE WHEELHOUSE RELEASE TORCH_VERSION [FROM_IMAGE]"
image=${1:?${usage}}
wheelhouse=$(realpath "${2:?${usage}}")
release=${3:?${usage}}
torch=${4:?${usage}}
from=${5:-torchimages/cuda:12.1.1-base-debian12}
if docker image inspect "${image}" > /dev/null 2>&1; then
    echo "ngc-shaped base: ${image} exists; reusing it"
    exit 0
fi
docker image inspect "${from}" > /dev/null 2>&1 || { echo "ngc-shaped base: FAILED: ${from} is missing (scripts/make-cuda-base-image.sh)" >&2; exit 1; }
started=$(date +%s)
container=$(docker create -v "${wheelhouse}:/wheels:ro" "${from}" bash -euc "
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends ca-certificates python3 python3-pip python3-dev python-is-python3
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb /usr/lib/python3*/EXTERNALLY-MANAGED
    pip install -q --no-cache-dir --no-index --find-links /wheels 'torch==${torch}' numpy
    python -c 'import torch; print(\"NGC_FACTS\", torch.__version__, torch.version.cuda)'
    pip list --format=freeze | grep -E '^nvidia-(cudnn|nccl)-' | sed 's/^/NGC_FACTS /'
")
log=$(mktemp)
trap 'docker rm -f "${container}" > /dev/null 2>&1 || true; rm -f "${log}"' EXIT
docker start -a "${container}" > "${log}" 2>&1 || { echo "ngc-shaped base: FAILED; last lines:" >&2; tail -20 "${log}" >&2; exit 1; }
version=$(sed -n 's/^NGC_FACTS \([^ ]*\) .*/\1/p' "${log}")   # torch.__version__, as NGC's PYTORCH_VERSION holds it
cudnn=$(sed -n 's/^NGC_FACTS nvidia-cudnn-[a-z0-9]*==//p' "${log}")
nccl=$(sed -n 's/^NGC_FACTS nvidia-nccl-[a-z0-9]*==//p' "${log}")
docker commit \
    --change "ENV NVIDIA_PYTORCH_VERSION=${release} PYTORCH_VERSION=${version} PYTORCH_BUILD_VERSION=${version} CUDNN_VERSION=${cudnn} NCCL_VERSION=${nccl} PYTHONIOENCODING=utf-8" \
    --change "LABEL org.opencontainers.image.title=\"NGC-shaped base for tests (torch ${torch}, release ${release})\"" \
    --change 'CMD ["/bin/bash"]' \
    "${container}" "${image}" > /dev/null
echo "ngc-shaped base: ${image} made FROM ${from}: torch ${version}, cuDNN ${cudnn}, NCCL ${nccl}," \
     "$(docker image inspect -f '{{.Size}}' "${image}") bytes, $(( $(date +%s) - started )) s"
