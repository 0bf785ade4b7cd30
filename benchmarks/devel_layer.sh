#!/usr/bin/env bash
# What the devel variant adds over its base, and a CUDA extension built in it with torch.utils.cpp_extension: the
# split layout the smoke suite builds (tests/smoke/probes/extension.py: the kernel's .cu apart from torch's headers),
# with all of TORCH_CUDA_ARCH_LIST and with one generation, and optionally one .cu holding torch/extension.h, each
# with the GPU code its .so carries.
#   benchmarks/devel_layer.sh DEVEL_IMAGE BASE_IMAGE [single]
# e.g. the cu130 entry of tests/integration/data/cu130-py311-devel.matrix.yaml built with --builder buildkit; `single`
# also times the one-file layout (about 5 minutes on 2 cores).
set -euo pipefail
devel=${1:?usage: benchmarks/devel_layer.sh DEVEL_IMAGE BASE_IMAGE [single]}
base=${2:?usage: benchmarks/devel_layer.sh DEVEL_IMAGE BASE_IMAGE [single]}
here=$(cd "$(dirname "$0")" && pwd)
probes="${here}/../tests/smoke/probes"
size() { docker image inspect -f '{{.Size}}' "$1"; }
echo "devel adds $(( ($(size "${devel}") - $(size "${base}")) / 1000000 )) MB over its base"
run() { docker run --rm -e TORCHIMAGES_NO_DOCTOR=1 -v "${probes}:/probes:ro" -v "${here}/devel-extension:/ext:ro" "$@"; }
run "${devel}" nvcc --version | tail -1
echo "split: $(run "${devel}" python /probes/extension.py | tail -1)"
echo "split, TORCH_CUDA_ARCH_LIST=8.0: $(run -e TORCH_CUDA_ARCH_LIST=8.0 "${devel}" python /probes/extension.py | tail -1)"
if [ "${3:-}" = single ]; then
    echo "single: $(run "${devel}" python /ext/build_ext.py | tail -1)"
fi
