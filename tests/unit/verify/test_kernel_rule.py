"""gpurules' kernel rule against CUDA's documented compatibility, over every GPU the compat data names and every arch
list the matrices and the compat data produce, then over arbitrary capabilities and arch lists.

CUDA C++ Programming Guide, "Binary Compatibility": a cubin for compute capability X.y runs only on GPUs of
compute capability X.z with z >= y (the same major). "Application Compatibility": PTX for X.y is compiled by the
driver for any GPU of compute capability X.y or higher (any major above).
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from torchimages.input import compat, matrix, specs
from torchimages.verify import fit

from ..conftest import GOLDEN, ROOT

Capability = tuple[int, int]


def documented_reach(words: list[str], gpu: Capability) -> bool:
    """Whether a torch with these TORCH_CUDA_ARCH_LIST words ('8.6', '12.0+PTX') has a kernel for `gpu`, by the
    guide: a word's cubin reaches the same major with an equal or higher minor; its PTX any equal or higher
    capability. Written from the guide, not from gpurules."""
    for word in words:
        ptx = word.endswith("+PTX")
        major, minor = (int(part) for part in word.removesuffix("+PTX").split("."))
        if (major == gpu[0] and minor <= gpu[1]) or (ptx and (major, minor) <= gpu):
            return True
    return False


def rule_reach(words: list[str], gpu: Capability) -> bool:
    """What gpurules decides, through the function fit and image-doctor call (a driver of no concern here)."""
    verdict, _reason = fit.rules().kernel_finding(" ".join(words), gpu)
    return verdict == fit.rules().RUNS


def gpu_capabilities() -> set[Capability]:
    found = set()
    for _name, capability in compat.load().gpus:
        major, minor = capability.split(".")
        found.add((int(major), int(minor)))
    return found


def spec_arch_lists() -> set[tuple[str, ...]]:
    """Each platform's arch list of every entry of matrix.yaml and the golden matrix: what image.json records
    ('7.5 8.0 12.0+PTX') and what a devel image's TORCH_CUDA_ARCH_LIST is ('7.5;8.0;12.0+PTX')."""
    found = set()
    for path in (ROOT / "matrix.yaml", GOLDEN / "matrix.yaml"):
        for spec in specs.resolve(matrix.load(path)).specs:
            for platform in spec.platforms:
                found |= {tuple(spec.gpu_archs(platform).split()), tuple(spec.cuda_arch_list(platform).split(";"))}
    return {words for words in found if any(words)}


def compat_arch_lists() -> set[tuple[str, ...]]:
    """Every torch build's generations on each machine in the compat data, with and without '+PTX' on the newest:
    what any entry of a matrix could produce."""
    found = set()
    for release in compat.load().torch:
        for build in release.builds:
            for machine in ("x86_64", "aarch64"):
                archs = build.archs_on(machine)
                if archs:
                    found |= {tuple(archs), (*archs[:-1], f"{archs[-1]}+PTX")}
    return found


def test_the_rule_is_the_documented_one_on_every_gpu_and_arch_list_of_the_data() -> None:
    arch_lists = spec_arch_lists() | compat_arch_lists()
    assert len(arch_lists) > 5 and len(gpu_capabilities()) > 10  # the data was read
    wrong = [(words, gpu) for words, gpu in itertools.product(sorted(arch_lists), sorted(gpu_capabilities()))
             if rule_reach(list(words), gpu) != documented_reach(list(words), gpu)]
    assert wrong == [], wrong[:5]


words_strategy = st.lists(st.tuples(st.integers(1, 13), st.integers(0, 9), st.booleans()), min_size=1, max_size=6).map(
    lambda arches: [f"{major}.{minor}" + ("+PTX" if ptx else "") for major, minor, ptx in arches])


@settings(max_examples=400, deadline=None)
@given(words=words_strategy, gpu=st.tuples(st.integers(1, 13), st.integers(0, 9)))
def test_the_rule_is_the_documented_one_on_any_capability_and_arch_list(words: list[str], gpu: Capability) -> None:
    assert rule_reach(words, gpu) == documented_reach(words, gpu), (words, gpu)


@settings(max_examples=200, deadline=None)
@given(words=words_strategy, gpu=st.tuples(st.integers(1, 13), st.integers(0, 9)))
def test_a_cubin_named_for_a_gpu_is_of_its_major_and_no_newer_minor(words: list[str], gpu: Capability) -> None:
    cubins, ptx = fit.rules().kernels_for(fit.rules().arch_list_of(" ".join(words)), gpu)
    for arch in cubins:
        _kind, major, minor = fit.rules().parse_arch(arch)
        assert major == gpu[0] and minor <= gpu[1], (arch, gpu)
    for arch in ptx:
        _kind, major, minor = fit.rules().parse_arch(arch)
        assert (major, minor) <= gpu, (arch, gpu)
