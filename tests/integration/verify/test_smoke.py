"""The smoke suite on real images: the CPU images pass every non-GPU check; broken images fail it."""

from __future__ import annotations

import io
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import junitparser
import pytest

from torchimages.containers import Containers
from torchimages.engine import Engine
from torchimages.verify import junit
from torchimages.verify.smoke import NO_GPU, SSH_FORMS, Check, SmokeResult, SmokeRunner, Target

from ..conftest import EntryBuild

pytestmark = [pytest.mark.lane("main")]

NEEDS_GPU = "needs-gpu"  # the tier of the checks only a GPU proves (tests/smoke/conftest.py)


def test_cpu_images_pass_every_non_gpu_check(smoke_run: tuple) -> None:
    result, report = smoke_run
    assert result.returncode == 0, f"smoke suite failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    for record in report["images"]:
        smoke = record["stages"]["smoke"]
        assert smoke["failed"] == 0 and smoke["error"] is None, record["image"]
        assert smoke["passed"] >= 10, f"{record['image']}: only {smoke['passed']} checks passed"
        print(f"smoke {record['image']}: {smoke['seconds']} s, {smoke['passed']} passed, {smoke['skipped']} skipped")


def test_gpu_checks_are_skipped_with_their_reason_never_passed(smoke_run: tuple) -> None:
    result, report = smoke_run
    base = next(r for r in report["images"] if r["variant"] == "base")["stages"]["smoke"]
    gpu_checks = [c for c in base["checks"] if c["tier"] == NEEDS_GPU]
    assert {c["name"].split("::")[0] for c in gpu_checks} == {"test_gpu", "test_compute"}, gpu_checks
    assert gpu_checks and all(c["outcome"] == "skipped" and NO_GPU in c["message"] for c in gpu_checks), gpu_checks
    assert base["skipped_no_gpu"] == len(gpu_checks) >= 8
    assert "checks skipped for lack of a GPU (skips are not passes)" in result.stderr


def test_the_junit_files_count_what_the_suite_counted(smoke_run: tuple) -> None:
    """`build.py test --junit DIR` (smoke_test passes it): a file per tested image, read back by a JUnit parser."""
    _result, report = smoke_run
    for record in report["images"]:
        smoke = record["stages"]["smoke"]
        suite = next(iter(junitparser.JUnitXml.fromfile(str(Path(report["_junit"]) / f"{record['image']}.xml"))))
        assert (suite.name, suite.tests, suite.failures, suite.skipped, suite.errors) == (
            record["image"], smoke["passed"] + smoke["failed"] + smoke["skipped"], smoke["failed"], smoke["skipped"], 0)
        gpu_skips = [r for case in suite for r in case.result if r.message.startswith(f"{junit.GPU_SKIP}{NO_GPU}")]
        assert len(gpu_skips) == smoke["skipped_no_gpu"], record["image"]
        assert record["variant"] != "base" or gpu_skips, "the base image's GPU checks are skipped here (no GPU)"


BROKEN = {  # the case: the variant it breaks and what its Dockerfile adds on top of the good image
    "label": ("base", 'LABEL io.torchimages.torch="2.12.0"\n'),
    "ssh-password": ("ssh", "USER 0:0\n"
                     "RUN sed -i -e 's/^PasswordAuthentication no/PasswordAuthentication yes/' "
                     "-e 's/^KbdInteractiveAuthentication no/KbdInteractiveAuthentication yes/' "
                     "/etc/ssh/torchimages_sshd_config && echo 'ml:hunter2' | chpasswd\nUSER 1000:1000\n"),
    "jupyter-no-token": ("jupyter", 'CMD ["jupyter", "lab", "--IdentityProvider.token="]\n'),
    "ssh-bare-sshd": ("ssh", "USER 0:0\n"
                      "RUN sed -i 's#^    sshd | /usr/sbin/sshd)$#    no-such-command)#' /usr/local/bin/torchimages-entrypoint\n"
                      "USER 1000:1000\n"),
}


def broken(api: docker.APIClient, dockerfile: str, tag: str) -> str:
    """Build a deliberately broken image on top of a good one."""
    stream = api.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True, decode=True)
    errors = [chunk for chunk in stream if "error" in chunk]
    assert not errors, errors
    return tag


# The base variant's three cases share one suite, as each costs a whole base suite (about 30 s, 20 of them torch.compile):
# the image with the wrong label, run with --require-gpu and Docker's default /dev/shm. Each test takes the failures of
# its own cause (base_failures), and the label's test checks that no failure is left over.
BASE_CASE = "label"


@pytest.fixture(scope="module")
def suites(api: docker.APIClient, cpu_build: EntryBuild) -> Iterator[dict[str, SmokeResult]]:
    """The suite on each deliberately broken image (the base's with --require-gpu and Docker's default /dev/shm too):
    two suites at a time, each with a runner of its own (each takes 20 to 30 s alone)."""
    runs: dict[str, tuple[SmokeRunner, Target]] = {}
    for case, (variant, added) in BROKEN.items():
        tag = broken(api, f"FROM {cpu_build.tags[variant]}\n{added}", f"torchimages-broken:{case}")
        runner = SmokeRunner(require_gpu=case == BASE_CASE)
        if case == BASE_CASE:
            runner.containers.shm_size = None
        runs[case] = (runner, Target(f"broken-{case}", tag, variant, "cpu", cpu_build.expected))
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {case: pool.submit(runner.run, target) for case, (runner, target) in runs.items()}
            yield {case: future.result() for case, future in futures.items()}
    finally:
        for case in BROKEN:
            api.remove_image(f"torchimages-broken:{case}", force=True)


def base_failures(result: SmokeResult) -> dict[str, list[Check]]:
    """The base case's failed checks by cause: the GPU checks (--require-gpu), the DataLoader (the default /dev/shm),
    and the rest."""
    causes: dict[str, list[Check]] = {"require-gpu": [], "default-shm": [], "rest": []}
    for check in result.checks:
        if check.outcome == "failed":
            cause = ("require-gpu" if check.tier == NEEDS_GPU else
                     "default-shm" if check.name.endswith("test_dataloader_with_workers_through_shm") else "rest")
            causes[cause].append(check)
    return causes


def test_require_gpu_turns_skips_into_failures(suites: dict[str, SmokeResult]) -> None:
    result = suites[BASE_CASE]
    needs_gpu = [c for c in result.checks if c.tier == NEEDS_GPU]
    assert len(needs_gpu) >= 8 and base_failures(result)["require-gpu"] == needs_gpu, [c.name for c in needs_gpu]
    assert all("--require-gpu" in c.message for c in needs_gpu), [c.message for c in needs_gpu]
    assert result.skipped_no_gpu == 0 and not result.ok


def failures(result: SmokeResult) -> dict[str, str]:
    return {c.name: c.message for c in result.checks if c.outcome == "failed"}


def test_torch_other_than_the_labels_say_fails(suites: dict[str, SmokeResult], cpu_build: EntryBuild) -> None:
    found = {c.name: c.message for c in base_failures(suites[BASE_CASE])["rest"]}  # no failure of another cause
    assert list(found) == ["test_versions::test_labels_match_the_image"], found
    assert f"label io.torchimages.torch='2.12.0' but the image has '{cpu_build.spec.torch}'" in next(iter(found.values()))


def test_ssh_with_password_login_fails(suites: dict[str, SmokeResult]) -> None:
    found = failures(suites["ssh-password"])
    assert {name.split("[")[0] for name in found} == {"test_ssh::test_password_login_is_refused"}, found
    assert len(found) == len(SSH_FORMS), f"every way of starting sshd must fail: {list(found)}"
    assert all("password login must be off" in message for message in found.values())


def test_jupyter_without_a_token_fails(suites: dict[str, SmokeResult]) -> None:
    found = failures(suites["jupyter-no-token"])
    names = {name.split("[")[0] for name in found}
    assert names == {"test_jupyter::test_authenticated_endpoint_needs_the_token"}, found
    assert all("authentication is off" in message for message in found.values())


def test_ssh_image_whose_sshd_command_is_bare_fails(suites: dict[str, SmokeResult]) -> None:
    """Without the entrypoint's dispatch, `IMAGE sshd` runs OpenSSH bare, which refuses to start."""
    result = suites["ssh-bare-sshd"]
    assert not result.ok and result.error, result.summary()
    assert "sshd started with sshd (['sshd'])" in result.error, result.error
    assert "sshd re-exec requires execution with an absolute path" in result.error, result.error


def test_this_engine_refuses_the_gpu_request_once_and_the_reason_is_kept(api: docker.APIClient,
                                                                        cpu_build: EntryBuild) -> None:
    """This machine's engine has no NVIDIA container toolkit: the runner asks for GPUs once, then runs without."""
    with Containers(Engine(api=api)) as tracked:
        started = [tracked.start(cpu_build.tags["base"], command=["sleep", "60"]) for _ in range(2)]
        assert tracked.gpu_request is False
        assert "could not select device driver" in tracked.gpu_note and "no NVIDIA container toolkit" in tracked.gpu_note
        assert all(api.inspect_container(c)["State"]["Running"] for c in started) and tracked.started == started
    assert not api.containers(all=True, filters={"id": started[0]}), "a tracked container outlived its helper"


def test_a_default_dev_shm_gives_the_doctors_hint_and_the_suites_failure(api: docker.APIClient, cpu_build: EntryBuild,
                                                                         suites: dict[str, SmokeResult]) -> None:
    """`docker run` without --shm-size gives 64 MB: the entrypoint's doctor says so and the DataLoader check fails."""
    container = api.create_container(cpu_build.tags["base"], command=["true"])  # the entrypoint runs the doctor first
    try:
        api.start(container)
        api.wait(container, timeout=120)
        assert "/dev/shm is 64 MB: add --shm-size 16g" in api.logs(container).decode()
    finally:
        api.remove_container(container, force=True)
    [dataloader] = base_failures(suites[BASE_CASE])["default-shm"]
    assert "start the container with a larger --shm-size" in dataloader.message, dataloader
