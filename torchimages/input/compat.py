"""Version-compatibility facts (data/compat.yaml) and the lookups the validator needs.

The data file is the product's knowledge: which torch builds exist for which CUDA, which
cuDNN and NCCL each bundles, which Python each has wheels for, what each NGC release holds
and which driver each CUDA needs. Code here only reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..errors import UserError
from . import grammar

# libyaml parses the packaged data several times faster than the pure-Python loader (both are safe loaders).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
CACHE = "compat.json"

# A file of extra NGC rows (e.g. the NGC-shaped base the integration tests make), merged over the
# reviewed data; `validate` warns for every image that relies on one of its rows.
EXTRA_ENV = "TORCHIMAGES_EXTRA_COMPAT"


def version_key(version: str) -> tuple[int, ...]:
    """Numeric sort key for dotted versions ('2.10.0' after '2.9.1'); junk sorts first."""
    parts = []
    for piece in version.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else -1)
    return tuple(parts)


def matches(short: str, full: str | None) -> bool:
    """True when `short` ('2.3', '12.1') is `full` ('2.3.1', '12.1') or a prefix of it."""
    if full is None:
        return False
    want, have = short.split("."), full.split("+")[0].split(".")
    return have[: len(want)] == want

# The platform the release-wide facts speak of, where no index lists a build's wheels per platform.
UNLISTED_PLATFORM = "x86_64"

@dataclass(frozen=True)
class TorchBuild:
    """One CUDA build of a torch release (a cuXYZ wheel index)."""

    variant: str
    cuda: str
    default: bool
    cudnn: str | None
    nccl: str | None
    archs: tuple[str, ...]
    sources: dict[str, list[str]]
    unconfirmed: tuple[str, ...]
    python: tuple[str, ...] = ()  # the Python versions this build has wheels for, as the indexes list them
    platforms: tuple[str, ...] = ()  # x86_64, aarch64; () where no index was read for the build
    # machine -> the GPU generations its wheel for that machine has kernels for, where they differ from `archs` (the
    # x86_64 wheel's): aarch64 builds leave out some older generations and add others
    machine_archs: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # machine -> the generation whose PTX its wheel carries (the newest, '12.0'); a machine not listed carries none
    machine_ptx: tuple[tuple[str, str], ...] = ()

    def ptx_on(self, machine: str) -> str | None:
        return dict(self.machine_ptx).get(machine)

    def archs_on(self, machine: str) -> tuple[str, ...]:
        """The GPU generations claimed for the wheel of `machine`: () where the data records none for it."""
        recorded = dict(self.machine_archs).get(machine)
        if recorded is not None:
            return recorded
        return self.archs if machine == UNLISTED_PLATFORM else ()

    def has_wheel(self, python: str, platform: str) -> bool | None:
        """Whether the indexes list a wheel of this build for `python` on `platform`; None where none was read."""
        if not self.python:
            return None
        return python in self.python and platform in self.platforms


@dataclass(frozen=True)
class TorchRelease:
    version: str
    python: tuple[str, ...]
    torchvision: str | None
    torchaudio: str | None
    builds: tuple[TorchBuild, ...]
    sources: tuple[str, ...]

    def build_for(self, cuda: str) -> TorchBuild | None:
        return next((b for b in self.builds if matches(b.cuda, cuda) or b.cuda == cuda), None)

    def has_wheel(self, build: TorchBuild, python: str, platform: str) -> bool:
        """A wheel of `build` for `python` on `platform`: as its index lists; where no index was read for the build, as
        the release's Python list says, which speaks of x86_64 only (RELEASE.md, the wheels read there)."""
        listed = build.has_wheel(python, platform)
        if listed is None:
            return platform == UNLISTED_PLATFORM and python in self.python
        return listed


@dataclass(frozen=True)
class NgcRelease:
    release: str
    image: str
    pytorch: str | None
    cuda: str | None
    cudnn: str | None
    nccl: str | None
    python: str | None
    ubuntu: str | None
    sources: tuple[str, ...]
    unconfirmed: tuple[str, ...]
    extra_file: str | None = None  # the EXTRA_ENV file this row came from; None for the reviewed data

    @property
    def complete(self) -> bool:
        """Usable for an image: every version an image label declares is recorded."""
        return all((self.pytorch, self.cuda, self.cudnn, self.nccl, self.python))


@dataclass(frozen=True)
class OsRelease:
    key: str
    image: str
    python: str
    unconfirmed: bool


@dataclass(frozen=True)
class CudaCompiler:
    """Where nvcc of a CUDA line comes from for a devel image: a PyPI requirement installing it under `home` in
    site-packages, or (pypi None) only NVIDIA's devel image, PyPI having none (`why`)."""

    line: str  # "13.0", or a major ("12") for every minor of it
    pypi: str | None
    home: str | None
    nvcc: str | None
    wheels: tuple[str, ...]  # the projects `pypi` installs that torch's wheels did not
    machines: tuple[str, ...]
    why: str | None
    devel_image: str | None
    sources: tuple[str, ...]


@dataclass(frozen=True)
class CompatData:
    sources: dict[str, str]
    torch: tuple[TorchRelease, ...]
    ngc: tuple[NgcRelease, ...]
    toolkit_driver: dict[str, str]
    family_driver: dict[str, str]
    ubuntu_by_cuda: dict[str, tuple[str, ...]]
    os_releases: tuple[OsRelease, ...]
    compilers: tuple[CudaCompiler, ...] = ()
    gpus: tuple[tuple[str, str], ...] = ()  # a GPU's name -> its compute capability ('L4' -> '8.9')

    def torch_release(self, version: str) -> TorchRelease | None:
        """Exact release, or the newest patch of a short version ('2.3' -> 2.3.1)."""
        found = [r for r in self.torch if r.version == version or matches(version, r.version)]
        return max(found, key=lambda r: version_key(r.version), default=None)

    def torch_versions(self) -> list[str]:
        return [r.version for r in self.torch]

    def ngc_release(self, release: str) -> NgcRelease | None:
        return next((r for r in self.ngc if r.release == release), None)

    def cuda_patches(self, cuda: str) -> list[str]:
        """nvidia/cuda X.Y.Z versions with published images for `cuda` (X.Y or X.Y.Z), oldest first."""
        found = [v for v in self.ubuntu_by_cuda if matches(cuda, v)]
        return sorted(found, key=version_key)

    def min_driver(self, cuda: str) -> str | None:
        """Linux driver the CUDA toolkit X.Y.Z requires; for a patch the table lacks, its newest known X.Y patch."""
        found = [v for v in self.toolkit_driver if matches(cuda, v)] or [
            v for v in self.toolkit_driver if matches(".".join(cuda.split(".")[:2]), v)]
        exact = max(found, key=version_key, default=None)
        return self.toolkit_driver[exact] if exact else None

    def family_min_driver(self, cuda: str) -> str | None:
        """Oldest driver that runs CUDA X.* through minor-version compatibility."""
        return self.family_driver.get(cuda.split(".", maxsplit=1)[0])

    def cuda_compiler(self, cuda: str) -> CudaCompiler | None:
        """The compiler source of CUDA X.Y: its own line's, else its major's."""
        lines = {c.line: c for c in self.compilers}
        return lines.get(".".join(cuda.split(".")[:2])) or lines.get(cuda.split(".", maxsplit=1)[0])

    def os_for_python(self, python: str) -> OsRelease | None:
        return next((o for o in self.os_releases if o.python == python), None)


@cache
def load() -> CompatData:
    """The packaged compatibility data, plus the rows of the EXTRA_ENV file when it is set (read once per process)."""
    extra = os.environ.get(EXTRA_ENV)
    return load_with(Path(extra) if extra else None)


def load_with(extra: Path | None) -> CompatData:
    """The packaged compatibility data, plus the NGC rows of `extra` (which replace rows of the same release)."""
    raw = packaged_raw()
    if extra:
        rows = extra_ngc_rows(extra)
        added = {row["release"] for row in rows}
        raw["ngc"] = [row for row in raw["ngc"] if row["release"] not in added] + rows
    return parse(raw)


def packaged_raw() -> dict[str, Any]:
    """compat.yaml as data: from its compiled copy compat.json when that was made from these very bytes (a JSON read
    costs a millisecond, YAML tens of them: every command starts here), else from the YAML itself."""
    folder = resources.files("torchimages").joinpath("data")
    text = folder.joinpath("compat.yaml").read_text(encoding="utf-8")
    try:
        cached = json.loads(folder.joinpath(CACHE).read_text(encoding="utf-8"))
        if cached.get("compat_yaml_sha256") == digest(text):
            return cached["data"]
    except (OSError, ValueError, AttributeError):
        pass
    return yaml.load(text, Loader=SAFE_LOADER)  # a safe loader: libyaml's when PyYAML has it


def digest(text: str) -> str:
    """What compat.json records of the compat.yaml it was compiled from."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_cache(folder: Path = Path(__file__).parents[1] / "data") -> Path:
    """Compile compat.yaml into compat.json (python -m torchimages.input.compat, after every change to compat.yaml)."""
    text = (folder / "compat.yaml").read_text(encoding="utf-8")
    data = yaml.load(text, Loader=SAFE_LOADER)
    payload = {"compat_yaml_sha256": digest(text),
               "note": "generated from compat.yaml by `python -m torchimages.input.compat`; edit compat.yaml", "data": data}
    (folder / CACHE).write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return folder / CACHE


EXTRA_REQUIRED = ("release", "image", "pytorch", "cuda", "cudnn", "nccl", "python", "sources")
EXTRA_FIELDS = (*EXTRA_REQUIRED, "ubuntu", "unconfirmed")


def extra_ngc_rows(path: Path) -> list[dict[str, Any]]:
    """The `ngc` rows of an extra facts file, each marked with the file. Its values reach Dockerfiles (the image in
    FROM) and labels, so each goes through the matrix's grammar; the first problem is one line naming the row and
    the field."""
    from ..checkedjson import Fields

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UserError(f"{EXTRA_ENV}={path}: cannot read it: {str(exc).splitlines()[0]}") from None
    except RecursionError:  # PyYAML's parser recurses per level of nesting
        raise UserError(f"{EXTRA_ENV}={path}: cannot read it: nested too deeply") from None
    if not isinstance(data, dict) or set(data) != {"ngc"} or not isinstance(data["ngc"], list):
        raise UserError(f"{EXTRA_ENV}={path}: must hold only 'ngc', a list of rows each with {', '.join(EXTRA_REQUIRED)}")
    rows = []
    for index, row in enumerate(data["ngc"]):
        fields = Fields(f"{EXTRA_ENV}={path}", row, f"ngc[{index}]", allowed=EXTRA_FIELDS)
        release = fields.required_text("release", lambda v: grammar.control_problem(v) or grammar.version_problem(v))
        fields.where = f"ngc[{index}] ({release})"
        fields.required_text("image", lambda v: grammar.control_problem(v) or grammar.image_reference_problem(v))
        for key in ("pytorch", "cuda", "cudnn", "nccl", "python"):
            fields.required_text(key, lambda v: grammar.control_problem(v) or grammar.version_problem(v))
        fields.text("ubuntu", lambda v: grammar.control_problem(v) or grammar.version_problem(v), optional=True)
        for key in ("sources", "unconfirmed"):
            value = row.get(key)
            if value is None and key == "unconfirmed":
                continue
            if not isinstance(value, list) or (not value and key == "sources") or not all(
                    isinstance(item, str) and 0 < len(item) <= 300 and not grammar.control_problem(item)
                    for item in value):
                fields.refuse(key, "must be a list of one-line strings (sources: where each fact was read)")
        rows.append({**row, "extra_file": str(path)})
    return rows


def parse(raw: dict[str, Any]) -> CompatData:
    os_raw = raw["os_python"]
    unsure = set(os_raw.get("unconfirmed", []))
    return CompatData(
        sources=raw["sources"],
        torch=tuple(_torch(r) for r in raw["torch"]),
        ngc=tuple(_ngc(r) for r in raw["ngc"]),
        toolkit_driver=raw["cuda_min_driver"]["toolkit"],
        family_driver=raw["cuda_min_driver"]["minor_version_compat_family"],
        ubuntu_by_cuda={k: tuple(v) for k, v in raw["cuda_image_tags"]["ubuntu_by_cuda"].items()},
        os_releases=tuple(
            OsRelease(key=k, image=v["image"], python=v["python"], unconfirmed=k in unsure)
            for k, v in os_raw["releases"].items()
        ),
        compilers=tuple(_compiler(line, row) for line, row in raw.get("cuda_compiler", {}).get("lines", {}).items()),
        gpus=tuple(raw.get("gpus", {}).get("compute_capability", {}).items()),
    )


def _compiler(line: str, row: dict[str, Any]) -> CudaCompiler:
    return CudaCompiler(line=line, pypi=row.get("pypi"), home=row.get("home"), nvcc=row.get("nvcc"),
                        wheels=tuple(row.get("wheels") or ()), machines=tuple(row.get("machines") or ()), why=row.get("why"),
                        devel_image=row.get("devel_image"), sources=tuple(row["sources"]))


def _torch(row: dict[str, Any]) -> TorchRelease:
    builds = tuple(
        TorchBuild(
            variant=b["variant"],
            cuda=b["cuda"],
            default=b["default"],
            cudnn=b["cudnn"],
            nccl=b["nccl"],
            archs=tuple(b.get("archs") or ()),
            sources=b["sources"],
            unconfirmed=tuple(b.get("unconfirmed", ())),
            python=tuple((b.get("wheels") or {}).get("python") or ()),
            platforms=tuple((b.get("wheels") or {}).get("platforms") or ()),
            machine_archs=tuple((machine, tuple(archs)) for machine, archs in (b.get("archs_by_machine") or {}).items()),
            machine_ptx=tuple((b.get("ptx") or {}).items()),
        )
        for b in row["builds"]
    )
    return TorchRelease(
        version=row["version"],
        python=tuple(row["python"]),
        torchvision=row.get("torchvision"),
        torchaudio=row.get("torchaudio"),
        builds=builds,
        sources=tuple(row["python_sources"]),
    )


def _ngc(row: dict[str, Any]) -> NgcRelease:
    return NgcRelease(
        release=row["release"],
        image=row["image"],
        pytorch=row.get("pytorch"),
        cuda=row.get("cuda"),
        cudnn=row.get("cudnn"),
        nccl=row.get("nccl"),
        python=row.get("python"),
        ubuntu=row.get("ubuntu"),
        sources=tuple(row["sources"]),
        unconfirmed=tuple(row.get("unconfirmed", ())),
        extra_file=row.get("extra_file"),
    )


if __name__ == "__main__":
    print(f"wrote {write_cache()}")
