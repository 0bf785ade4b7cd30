"""A build report read back (push, `build.py manifest`) is input: a report can be edited, or come from another run's
artifacts. Every value that later names a tag, a digest, a path or a file is checked against its grammar here, and the
first problem is one line naming the report, the image and the field."""

from __future__ import annotations

from pathlib import Path

from .checkedjson import Check, digest_problem, relative_path_problem, sha256_problem
from .errors import Problem, UserError, visible
from .input import grammar
from .input.matrix import PLATFORMS, VARIANTS
from .input.specs import NAME, release_problem
from .manifest import (
    image_name_problem,
    runs_on_key_problem,
    runs_on_value_problem,
    tag_part_problem,
    version_key_problem,
    version_value_problem,
)
from .report import ImageRecord, Report

NUMBERS = ("size_bytes", "adds_bytes", "floor_bytes", "layers")


def check_report(report: Report, path: Path) -> None:
    def refuse(where: str | None, field: str, message: str) -> None:
        raise UserError([Problem(str(path), None, where, field, message)])

    for field, value in (("release", report.release), ("matrix", report.matrix)):
        if not isinstance(value, str):
            refuse(None, field, "must be a string")
    why = release_problem(report.release)
    if why:
        refuse(None, "release", why)
    names = []
    for index, record in enumerate(report.images):
        name = record.image if isinstance(record.image, str) else repr(record.image)
        where = f"images[{index}] ({visible(name)})"
        problem = record_problem(record)
        if problem:
            refuse(where, *problem)
        names.append(record.image)
    if len(set(names)) != len(names):
        refuse(None, "images", f"names {next(n for n in names if names.count(n) > 1)!r} twice; each image once")


def record_problem(record: ImageRecord) -> tuple[str, str] | None:
    """(field, why) for the first value of a record that is refused, or None."""
    texts = {"image": record.image, "entry": record.entry, "variant": record.variant, "tag": record.tag,
             "result": record.result}
    for field, value in texts.items():
        if not isinstance(value, str):
            return field, "must be a string"
    checks = [
        ("image", image_name_problem(record.image)),
        ("entry", None if NAME.match(record.entry) else f"{visible(record.entry)!r} is not an entry name"),
        ("variant", None if record.variant in ("base", *VARIANTS) else f"{visible(record.variant)!r} is not a variant"),
        ("platform", None if isinstance(record.platform, str) and record.platform in PLATFORMS
         else f"{visible(str(record.platform))!r} is not a platform: {', '.join(PLATFORMS)}"),
        ("tag", grammar.control_problem(record.tag) or grammar.image_reference_problem(record.tag)),
        ("image_id", optional(record.image_id, digest_problem)),
        ("content_digest", optional(record.content_digest, digest_problem)),
    ]
    checks += [(field, number_problem(getattr(record, field))) for field in NUMBERS]
    if not isinstance(record.versions, dict):
        checks.append(("versions", "must be a JSON object"))
    else:
        checks += [("versions", version_key_problem(str(key)) or version_value_problem(value))
                   for key, value in record.versions.items()]
    if record.runs_on is not None and not isinstance(record.runs_on, dict):
        checks.append(("runs_on", "must be a JSON object"))
    elif record.runs_on is not None:
        checks += [("runs_on", runs_on_key_problem(str(key)) or runs_on_value_problem(value))
                   for key, value in record.runs_on.items()]
    if record.smoke is not None:
        checks.append(("stages.smoke.image_id", optional(record.smoke.image_id, digest_problem)))
        checks += [(f"stages.smoke.{field}", number_problem(getattr(record.smoke, field)))
                   for field in ("passed", "failed", "skipped", "skipped_no_gpu")]
    if record.push is not None:
        push = record.push
        checks += [("stages.push.reference", text_problem(push.reference, grammar.image_reference_problem)),
                   ("stages.push.digest", optional(push.digest, digest_problem)),
                   ("stages.push.candidate", optional(push.candidate, tag_part_problem))]
    if record.sbom is not None:
        sbom = record.sbom
        checks += [("stages.sbom.path", text_problem(sbom.path, relative_path_problem)),
                   ("stages.sbom.sha256", text_problem(sbom.sha256, sha256_problem)),
                   ("stages.sbom.image_id", text_problem(sbom.image_id, digest_problem))]
    return next(((field, why) for field, why in checks if why), None)


def optional(value: object, check: Check) -> str | None:
    return None if value is None else text_problem(value, check)


def text_problem(value: object, check: Check) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    return grammar.control_problem(value) or check(value)


def number_problem(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return "must be a number of 0 or more"
    return None

