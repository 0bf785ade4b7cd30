"""A matrix file as the checked plan every command starts from: its shape and every version combination
validated (torchimages.input.matrix, torchimages.input.specs), the whole image tag within Docker's 128 characters for the
release, the warnings printed, and the lock's pins (torchimages.input.lock) on it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..consoles import err
from ..errors import UserError
from ..workspace import Workspace
from . import matrix as matrix_stage
from .grammar import MAX_TAG
from .lock import LockFile
from .lock import stale as stale_pins
from .specs import Plan, image_tag, resolve


def load(path: Path, *, max_images: int = matrix_stage.MAX_IMAGES, release: str | None = None,
         quiet: bool = False) -> Plan:
    """Validate the matrix fully (shape, then compatibility) and print its warnings unless `quiet`."""
    plan = resolve(matrix_stage.load(path, max_images=max_images))
    if release is not None:
        check_tag_lengths(plan, release, "--tag")
    lock = LockFile.load(Workspace(path).lock)
    if not quiet:
        for spec in plan.specs:
            for warning in spec.warnings:
                err.print(f"warning: {path}: {spec.origin}: {warning}")
        if lock.pins:
            for problem in stale_pins(plan, lock):
                err.print(f"warning: {problem}: run python build.py lock")
    return replace(plan, pins=lock.digests())


def check_tag_lengths(plan: Plan, prefix: str, option: str) -> None:
    """Docker's 128 characters hold for the whole image tag, PREFIX-IMAGE, not for the release alone."""
    longest = max((image_tag(prefix, built.image) for spec in plan.specs for built in spec.platform_images()), key=len,
                  default="")
    if len(longest) > MAX_TAG:
        raise UserError(f"{option} {prefix[:40]!r}...: the image tag {longest[:60]}... would be {len(longest)} characters; "
                        f"Docker's limit is {MAX_TAG} for the release, '-' and the image name together: shorten it")
