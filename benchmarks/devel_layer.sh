#!/usr/bin/env bash
# Issue 30's measurement: a devel layer (nvcc from PyPI) on a CUDA 13.0 base image this project built, what it adds,
# and a CUDA extension built in it with torch.utils.cpp_extension in two layouts, with the GPU code its .so carries.
#   benchmarks/devel_layer.sh BASE_IMAGE [single]
# BASE_IMAGE: the cu130 entry's amd64 base, e.g. built from tests/integration/data/cu130-py311.matrix.yaml with
# --builder buildkit; `single` also times the one-file layout (about 5 minutes on 2 cores).
set -euo pipefail
base=${1:?usage: benchmarks/devel_layer.sh BASE_IMAGE [single]}
here=$(cd "$(dirname "$0")" && pwd)
context=$(mktemp -d)
trap 'rm -rf "${context}"' EXIT
cp "${here}/devel-extension/Dockerfile" "${context}/"
bash "${here}/../scripts/make-wheelhouse.sh" "${context}/wheels" 3.11.2 "cuda-toolkit[nvcc,cccl]==13.0.3" ninja
started=$(date +%s)
docker buildx build --load --quiet --build-arg "BASE=${base}" -t torchimages-devel-bench "${context}" > /dev/null
echo "devel layer: built in $(( $(date +%s) - started )) s; adds $(( ($(docker image inspect -f '{{.Size}}' torchimages-devel-bench) - $(docker image inspect -f '{{.Size}}' "${base}")) / 1000000 )) MB"
run() { docker run --rm -e TORCHIMAGES_NO_DOCTOR=1 "$@"; }
run torchimages-devel-bench nvcc --version | tail -1
for layout in split ${2:-}; do
    run -v "${here}/devel-extension:/ext:ro" torchimages-devel-bench python /ext/build_ext.py "${layout}" | tail -1
done
run -e TORCH_CUDA_ARCH_LIST=8.0 -v "${here}/devel-extension:/ext:ro" torchimages-devel-bench python /ext/build_ext.py split | tail -1
docker image rm torchimages-devel-bench > /dev/null
