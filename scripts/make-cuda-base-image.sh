#!/usr/bin/env bash
# Make a local stand-in for nvidia/cuda:X.Y.Z-base-*, for machines that reach no container registry:
# the Debian base image (scripts/make-base-image.sh) with the runtime contract the nvidia/cuda base
# images document, which the NVIDIA container runtime and the CUDA libraries read: CUDA_VERSION,
# NVIDIA_REQUIRE_CUDA, NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES, and the driver's
# library folders in LD_LIBRARY_PATH and ld.so.conf. It holds no CUDA library: torch's wheels bring
# their own, so each library exists once. Builds use it through --base-image.
#   scripts/make-cuda-base-image.sh CUDA_VERSION [IMAGE] [FROM_IMAGE]
#   e.g. scripts/make-cuda-base-image.sh 12.1.1     (makes torchimages/cuda:12.1.1-base-debian12)
#   scripts/make-cuda-base-image.sh 13.0.3 torchimages/cuda:13.0.3-base-debian12-arm64 torchimages/debian:bookworm-minbase-arm64
set -euo pipefail
cuda=${1:?usage: make-cuda-base-image.sh CUDA_VERSION [IMAGE] [FROM_IMAGE]}
[[ "${cuda}" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "make-cuda-base-image.sh: CUDA_VERSION must be X.Y.Z, not '${cuda}'" >&2; exit 2; }
image=${2:-torchimages/cuda:${cuda}-base-debian12}
from=${3:-torchimages/debian:bookworm-minbase}
if docker image inspect "${image}" > /dev/null 2>&1; then
    echo "cuda base image: ${image} exists; reusing it"
    exit 0
fi
docker image inspect "${from}" > /dev/null 2>&1 || bash "$(dirname "$0")/make-base-image.sh" "${from}"
major_minor=$(echo "${cuda}" | cut -d. -f1-2)
# The architecture NVIDIA's images name in NVARCH: x86_64, or sbsa for arm64 servers (Grace); the FROM image's own.
case "$(docker image inspect -f '{{.Architecture}}' "${from}")" in
    arm64) nvarch=sbsa ;;
    *) nvarch=x86_64 ;;
esac
# The classic builder (DOCKER_BUILDKIT=0) needs no buildx plugin and pulls nothing: FROM is local.
log=$(mktemp)
trap 'rm -f "${log}"' EXIT
DOCKER_BUILDKIT=0 docker build --tag "${image}" - > "${log}" 2>&1 << DOCKERFILE || { echo "cuda base image: FAILED:" >&2; cat "${log}" >&2; exit 1; }
FROM ${from}
ENV NVARCH=${nvarch} \\
    CUDA_VERSION=${cuda} \\
    NVIDIA_REQUIRE_CUDA="cuda>=${major_minor}" \\
    NVIDIA_VISIBLE_DEVICES=all \\
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \\
    PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64
RUN printf '%s\n' /usr/local/nvidia/lib /usr/local/nvidia/lib64 > /etc/ld.so.conf.d/nvidia.conf
LABEL org.opencontainers.image.title="CUDA ${cuda} base (local stand-in for nvidia/cuda:${cuda}-base)" \\
      org.opencontainers.image.base.name="${from}"
CMD ["/bin/bash"]
DOCKERFILE
echo "cuda base image: ${image} made FROM ${from} ($(docker image inspect -f '{{.Size}}' "${image}") bytes)"
