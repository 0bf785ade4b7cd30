"""What a build takes from the network it runs in: mirrors, proxies, a CA bundle, a wheelhouse.

None of it may end up in an image: index URLs, the CA bundle and the wheelhouse are used only
in builder stages; proxy variables are Docker's predefined build args, which it keeps out of the
image history; an apt mirror (used in the final stage) may not carry credentials.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from packaging.utils import canonicalize_name

from ..errors import UserError
from ..input import grammar
from ..input.grammar import DEFAULT_PLATFORM, PLATFORMS

# Wheels of torch and the CUDA stack it depends on (file names use underscores for dashes).
TORCH_STACK_WHEEL = re.compile(r"^(torch|triton|nvidia_[a-z0-9_]+|cuda_[a-z0-9_]+)-", re.IGNORECASE)
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "FTP_PROXY", "ALL_PROXY")


@dataclass(frozen=True)
class BuildInputs:
    pip_index_url: str | None = None
    torch_index_url: str | None = None
    apt_mirror: str | None = None
    ca_bundle: Path | None = None
    wheelhouse: Path | None = None
    offline: bool = False
    base_image: str | None = None  # --base-image IMAGE: every platform's base builds FROM it (a multi-platform name)
    platform_bases: tuple[tuple[str, str], ...] = ()  # --base-image PLATFORM=IMAGE: that platform's, before the plain one

    def base_for(self, platform: str) -> str | None:
        """The image a base build for `platform` is FROM instead of the matrix's, or None."""
        return dict(self.platform_bases).get(platform) or self.base_image

    def check(self) -> None:
        """Refuse inputs that cannot work or would leak, before anything is built."""
        for option, url in (("--pip-index-url", self.pip_index_url), ("--torch-index-url", self.torch_index_url),
                            ("--apt-mirror", self.apt_mirror)):
            if url and (why := grammar.url_problem(url, option)):
                raise UserError(why)
        for platform, image in (("", self.base_image), *self.platform_bases):
            if image and (why := grammar.control_problem(image) or grammar.image_reference_problem(image)):
                raise UserError(f"--base-image{' ' + platform + '=' if platform else ''}: {why}")
        if self.apt_mirror and "@" in urlsplit(self.apt_mirror).netloc:  # user, password or token
            raise UserError("--apt-mirror must not contain credentials: apt runs in the final image's build stage, "
                            "whose arguments Docker records; use an authenticating proxy (HTTP_PROXY) instead")
        if self.ca_bundle and not self.ca_bundle.is_file():
            raise UserError(f"--ca-bundle {self.ca_bundle}: no such file")
        if self.wheelhouse and not any(self.wheelhouse.glob("*.whl")):
            raise UserError(f"--wheelhouse {self.wheelhouse}: no .whl files there")
        if self.offline and not self.wheelhouse:
            raise UserError("--offline needs --wheelhouse DIR: pip then installs only from there")
        for key in proxy_keys():  # the environment's, handed to every build as they are: one line of visible text
            if why := grammar.control_problem(os.environ[key]):
                raise UserError(f"{key}: {why}")

    def buildargs(self, *, base_image: str | None) -> dict[str, str]:
        """Build args for one image; proxies pass through from the environment."""
        args = {key.upper(): os.environ[key] for key in proxy_keys()}
        optional = {"PIP_INDEX_URL": self.pip_index_url, "TORCH_INDEX_URL": self.torch_index_url,
                    "APT_MIRROR": self.apt_mirror, "BASE_IMAGE": base_image}
        args.update({key: value for key, value in optional.items() if value})
        if self.offline:
            args["OFFLINE"] = "1"
        return args

    def fill_context(self, context: Path, *, installs_torch: bool, platform: str = DEFAULT_PLATFORM,
                     stack_wheels: tuple[str, ...] = (), locks: dict[str, str] | None = None) -> None:
        """Put the CA bundle and the wheelhouse where the builder stages COPY them from.

        torch and the CUDA libraries it pulls (several GB) go only into builds that install torch:
        a variant or an NGC image already has them, and each wheel in a context is sent to the
        engine and stored in a builder layer; a variant gets only those of them it installs itself (`stack_wheels`,
        projects: the devel variant's compiler). Only the wheels that run on the build's platform go: one wheelhouse
        may hold every platform's. `locks` (--from-release: step -> its lock) go to build-config/wheel-lock/, where
        each pip step installs its own instead of resolving its requirements (build/released.py).
        """
        wanted = {canonicalize_name(name) for name in stack_wheels}
        config = context / "build-config"
        if not config.is_dir():
            return
        if self.ca_bundle:
            shutil.copyfile(self.ca_bundle, config / "extra-ca.pem")
        if locks is not None:
            (config / "wheel-lock").mkdir()
            for step, text in locks.items():
                (config / "wheel-lock" / f"{step}.txt").write_text(text, encoding="utf-8")
        if self.wheelhouse:
            machine = PLATFORMS[platform]
            for wheel in sorted(self.wheelhouse.glob("*.whl")):
                needed = installs_torch or not TORCH_STACK_WHEEL.match(wheel.name) or wheel_project(wheel.name) in wanted
                if needed and runs_on(wheel.name, machine):
                    link_or_copy(wheel, config / "wheelhouse" / wheel.name)


INDEX_ARGS = ("PIP_INDEX_URL", "TORCH_INDEX_URL")  # where pip may download from during a build


def proxy_keys() -> list[str]:
    """The proxy variables set in the environment, each as spelled there (HTTPS_PROXY, then https_proxy, which wins)."""
    return [key for name in PROXY_VARIABLES for key in (name, name.lower()) if os.environ.get(key)]


def wheel_project(wheel: str) -> str:
    """The canonical project of a wheel file name, from its first dash-separated part (nvidia_cuda_nvcc-13.0.88-...
    -> nvidia-cuda-nvcc)."""
    return canonicalize_name(wheel.split("-", 1)[0])


def runs_on(wheel: str, machine: str) -> bool:
    """Whether a wheel (by its file name's platform tags, e.g. manylinux_2_28_aarch64.manylinux2014_aarch64) runs on a
    Linux `machine` (x86_64, aarch64): a pure wheel (any) runs everywhere."""
    platforms = wheel.removesuffix(".whl").rsplit("-", 1)[-1].split(".")
    return any(tag == "any" or tag.endswith(f"_{machine}") for tag in platforms)


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link where the file system allows (wheelhouses are large), else a copy with the file's times (BuildKit
    then sends it again only when it changed: contexts.py)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def copy_context(source: Path, target: Path) -> None:
    """A private copy of a rendered context (render wrote build-config/ only into contexts whose Dockerfile COPYs it)."""
    shutil.copytree(source, target, copy_function=shutil.copy2)
