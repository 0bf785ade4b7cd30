"""The kernel and driver rules of templates/files/gpurules.py (which `build.py fit`, image-doctor and the GPU probes
share), checked against their definitions on every pair of GPU generations rather than on a few examples: a cubin
(sm_XY) runs on a GPU of the same major and an equal or higher minor; PTX (compute_XY) on any GPU of capability XY or
higher; a '+PTX' generation has both; a driver is new enough when its version, number by number, is at least the one
the image needs."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from torchimages.verify import fit

# Every compute capability CUDA has named, and a few beyond, to guard the rule for the next generations
CAPABILITIES = [(major, minor) for major in range(3, 16) for minor in range(10)]
gpurules = fit.rules()


def cubin_runs(arch: tuple[int, int], gpu: tuple[int, int]) -> bool:
    return arch[0] == gpu[0] and arch[1] <= gpu[1]


def ptx_runs(arch: tuple[int, int], gpu: tuple[int, int]) -> bool:
    return arch <= gpu


def test_each_kernel_reaches_exactly_the_gpus_its_definition_names() -> None:
    for arch, gpu in itertools.product(CAPABILITIES, CAPABILITIES):
        code = f"{arch[0]}{arch[1]}"
        cubins, ptx = gpurules.kernels_for([f"sm_{code}", f"compute_{code}"], gpu)
        assert (cubins == [f"sm_{code}"]) is cubin_runs(arch, gpu), (arch, gpu, cubins)
        assert (ptx == [f"compute_{code}"]) is ptx_runs(arch, gpu), (arch, gpu, ptx)


generation = st.sampled_from(CAPABILITIES)
declared = st.lists(st.tuples(generation, st.booleans()), min_size=1, max_size=8, unique_by=lambda g: g[0])


def words(archs: list[tuple[tuple[int, int], bool]]) -> str:
    """A label's words: '7.5 8.0 12.0+PTX'."""
    return " ".join(f"{major}.{minor}" + ("+PTX" if ptx else "") for (major, minor), ptx in archs)


@settings(max_examples=400, deadline=None)
@given(declared, generation)
def test_an_image_runs_on_a_gpu_exactly_when_a_declared_kernel_reaches_it(archs: list, gpu: tuple[int, int]) -> None:
    by_cubin = any(cubin_runs(arch, gpu) for arch, _ in archs)
    by_ptx = any(ptx and ptx_runs(arch, gpu) for arch, ptx in archs)
    assert gpurules.covers(gpurules.arch_list_of(words(archs)), gpu) is (by_cubin or by_ptx)
    verdict, reason = gpurules.kernel_finding(words(archs), gpu, "new enough", "13.0")
    assert verdict == (gpurules.RUNS if by_cubin or by_ptx else gpurules.FAILS), reason
    if not by_cubin and by_ptx:  # PTX alone needs the driver's JIT, which minor-version compatibility does not give
        assert gpurules.kernel_finding(words(archs), gpu, "minor-version compatibility", "13.0")[0] == gpurules.FAILS
    elif by_cubin:
        assert gpurules.kernel_finding(words(archs), gpu, "minor-version compatibility", "13.0")[0] == gpurules.RUNS


@given(generation)
def test_a_ptx_generation_keeps_its_own_kernels(arch: tuple[int, int]) -> None:
    code = f"{arch[0]}{arch[1]}"
    assert gpurules.arch_list_of(f"{arch[0]}.{arch[1]}+PTX") == [f"sm_{code}", f"compute_{code}"]
    assert gpurules.arch_list_of(f"{arch[0]}.{arch[1]}") == [f"sm_{code}"]


driver = st.tuples(st.integers(300, 999), st.integers(0, 250), st.integers(0, 99))


@given(driver, driver)
def test_a_driver_is_new_enough_when_it_is_at_least_the_one_needed_number_by_number(have: tuple, need: tuple) -> None:
    image = {"cuda": "13.0", "min_driver": "{}.{}.{:02d}".format(*need), "min_driver_minor_compat": "none"}
    state = gpurules.driver_state("{}.{}.{:02d}".format(*have), image, data_center=False, compat_package=False)
    assert state == ("new enough" if have >= need else "too old"), (have, need, state)
