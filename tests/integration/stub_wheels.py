"""Wheels that stand for large ones where a test proves build mechanics (where wheels come from, which platform's
are picked), not the package: a few kilobytes of Python with what the build reads of them (torch's version and the
CUDA it was built for), so a build installs, commits and scans kilobytes where torch's are gigabytes."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def record_of(text: str) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    return f"sha256={digest},{len(text.encode())}"


def stub_wheel(folder: Path, name: str, version: str, files: dict[str, str], tag: str = "py3-none-any") -> Path:
    """A wheel of `name` `version` holding `files`, for the platform `tag` (a pure one by default)."""
    info = f"{name}-{version}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: torchimages-tests\n"
                              f"Root-Is-Purelib: {'true' if tag.endswith('-any') else 'false'}\nTag: {tag}\n"}
    rows = [f"{path},{record_of(text)}" for path, text in files.items()]
    files[f"{info}/RECORD"] = "\n".join([*rows, f"{info}/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def stub_torch_wheel(folder: Path, version: str, cuda: str | None, tag: str = "py3-none-any", **facts: str) -> Path:
    """torch `version` built for `cuda` (None: a CPU build), with `facts` more in torch/version.py."""
    version_py = f"__version__ = {version!r}\ncuda = {cuda!r}\n" + "".join(f"{k} = {v!r}\n" for k, v in facts.items())
    return stub_wheel(folder, "torch", version, {"torch/__init__.py": f"__version__ = {version!r}\nfrom . import version\n",
                                                  "torch/version.py": version_py}, tag)
