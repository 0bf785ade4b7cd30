"""Valid files of the release path, for tests to break one value at a time: a candidates' manifest with its SBOMs
beside it, as push --candidate writes it, and a pushed image's record in a build report."""

from __future__ import annotations

import hashlib
from pathlib import Path

from torchimages.report import ImageRecord, PushStage, SmokeStage

from .conftest import digest

REPOSITORY = "127.0.0.1:9/ml/pt"  # nothing listens on port 9: a command that reached the registry would say so
CPU = "torch2.13.0-cpu-py3.11"
IMAGES = (CPU, f"{CPU}-jupyter", f"{CPU}-ssh")
SBOM = b'{"spdxVersion": "SPDX-2.3", "packages": []}'


def candidates(folder: Path, candidate: str | None = "rc.1") -> dict:
    """A candidates' manifest as push --candidate writes it, with its SBOMs beside it."""
    (folder / "c.sbom").mkdir(parents=True, exist_ok=True)
    images = []
    for n, name in enumerate(IMAGES):
        (folder / "c.sbom" / f"{name}.spdx.json").write_bytes(SBOM)
        variant = name.rsplit("-", 1)[1] if name != CPU else "base"
        pushed = f"v2.7-{candidate}-{name}" if candidate else f"v2.7-{name}"
        images.append({
            "image": name, "variant": variant, "tag": f"{REPOSITORY}:{pushed}", "release_tag": f"{REPOSITORY}:v2.7-{name}",
            "reference": f"{REPOSITORY}@{digest(n)}", "digest": digest(n), "size_bytes": 1_400_000_000, "layers": 12,
            "versions": {"torch": "2.13.0", "cuda": None, "cudnn": None, "nccl": None, "python": "3.11", "ngc": None},
            "content_digest": digest(f"c{n}"), "smoke": {"passed": 9, "failed": 0, "skipped": 2, "skipped_no_gpu": 2},
            "runs_on": {"min_driver": "none", "min_driver_minor_compat": "none", "gpu_archs": "none"},
            "sbom": {"path": f"c.sbom/{name}.spdx.json", "sha256": hashlib.sha256(SBOM).hexdigest(),
                     "packages": {"deb": 90}}})
    return {"release": "v2.7", "candidate": candidate, "repository": REPOSITORY, "images": images}


def pushed_record(**changes: object) -> ImageRecord:
    smoke = SmokeStage(9, 0, 2, 2, 1.0, 0, {}, None, image_id=digest("id"))
    values = {"image": CPU, "entry": CPU, "variant": "base", "tag": f"registry.example.com/ml/pytorch:v2.7-{CPU}",
              "result": "built", "versions": {"torch": "2.13.0", "python": "3.11"}, "image_id": digest("id"),
              "runs_on": {"min_driver": "none", "min_driver_minor_compat": "none", "gpu_archs": "none"},
              "smoke": smoke, "push": PushStage(f"{REPOSITORY}:v2.7-{CPU}", digest=digest(0))}
    return ImageRecord(**{**values, **changes})


CU130 = "torch2.14.0-cu130-cudnn9.24-py3.11"
PLATFORM_IMAGES = ((f"{CU130}-amd64", "linux/amd64", "base"), (f"{CU130}-arm64", "linux/arm64", "base"),
                   (f"{CU130}-ssh-amd64", "linux/amd64", "ssh"), (f"{CU130}-ssh-arm64", "linux/arm64", "ssh"))


GPU_ARCHS = {"linux/amd64": "7.5 8.0 8.6 9.0 10.0 12.0", "linux/arm64": "8.0 8.6 9.0 10.0 11.0 12.0"}


def two_platform_release(index_digests: tuple[str, str] = (digest("i0"), digest("i1"))) -> dict:
    """A release manifest as promote writes it for an entry of two platforms: each platform's images, and an image
    index per image name over them."""
    images = [{"image": name, "variant": variant, "platform": platform, "digest": digest(f"p{n}"),
               "versions": {"torch": "2.14.0", "cuda": "13.0", "python": "3.11"},
               "smoke": {"passed": 20, "failed": 0, "skipped": 10, "skipped_no_gpu": 8},
               "runs_on": {"min_driver": "580.95.05", "min_driver_minor_compat": "580", "gpu_archs": GPU_ARCHS[platform]}}
              for n, (name, platform, variant) in enumerate(PLATFORM_IMAGES)]
    indexes = [{"name": name, "digest": index_digest, "release_tag": f"{REPOSITORY}:v2.7-{name}",
                "platforms": {"linux/amd64": f"{name}-amd64", "linux/arm64": f"{name}-arm64"}}
               for name, index_digest in zip((CU130, f"{CU130}-ssh"), index_digests, strict=True)]
    return {"release": "v2.7", "candidate": None, "promoted_from": "rc.1", "repository": REPOSITORY, "images": images,
            "indexes": indexes}
