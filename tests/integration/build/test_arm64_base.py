"""linux/arm64 on this x86_64 machine, under emulation: scripts/setup-emulation.sh registers Debian trixie's qemu 10
with the kernel (bookworm's 7.2 dies on `import torch`), and scripts/make-base-image.sh makes the arm64 Debian base
with debootstrap, its configuration given its real architecture (docker 20.10's import labels every rootfs amd64)."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from ..conftest import run_in

pytestmark = [pytest.mark.lane("main")]

QEMU = Path("/opt/torchimages/qemu/qemu-aarch64")


def test_the_arm64_base_runs_arm64_binaries_and_says_so(api: docker.APIClient, arm64_base_image: str) -> None:
    info = api.inspect_image(arm64_base_image)
    assert (info["Os"], info["Architecture"], info.get("Variant")) == ("linux", "arm64", "v8"), info
    _, output = run_in(api, arm64_base_image, ["sh", "-c", "uname -m; dpkg --print-architecture"])
    assert output.split() == ["aarch64", "arm64"], output


def test_arm64_binaries_run_through_the_emulator_that_imports_torch(arm64_base_image: str) -> None:
    handler = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").read_text()
    assert f"interpreter {QEMU}" in handler and "F" in handler.split("flags: ")[1].split()[0], handler
    assert QEMU.is_file()
