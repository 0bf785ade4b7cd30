"""The grammar of every value: one rule per kind of value, used by every reader.

A value reaches a Dockerfile, a shell, a tag, a path or a registry request from many places: the matrix, the command
line, files this tool wrote earlier and reads back (build reports, release manifests, rendered.json, the lock, the
digest cache), and answers from outside (a registry, an index). Each kind of value has one rule here, and every reader
of every file kind calls it, so a rule fixed once is fixed everywhere. Each check returns why a value is refused (with
what would be valid), or None. Digits are ASCII everywhere: every pattern is compiled with re.ASCII, as Python's \\d
and str.isdigit() also take other scripts' digits ('٥٨٠').

What a host says of itself (a driver version, a compute capability, nvidia-smi's answers) is judged by
templates/files/gpurules.py instead: every image carries that file for image-doctor, and `build.py fit` loads the same
file, so the answer before the pull and the one inside the container cannot differ.

The loader runs the matrix's checks on every entry before compatibility is checked, so a hostile value never reaches
the template; the template still shell-quotes what it interpolates into RUN lines (a second defence: a PEP 508 marker
legitimately holds quotes and `;`).
"""

from __future__ import annotations

import math
import re
import sys
import unicodedata
from collections.abc import Callable
from urllib.parse import urlsplit

from ..errors import visible

Check = Callable[[str], "str | None"]  # why a value is refused, or None


def pattern(text: str, flags: int = 0) -> re.Pattern[str]:
    """Every pattern of the grammar: ASCII only, so [0-9] and \\w never take another script's digits or letters."""
    return re.compile(text, re.ASCII | flags)


# The vocabulary: the variants an entry may add and the platforms it may be built for (OCI os/architecture), with the
# machine name wheels are tagged with for each.
VARIANTS = ("jupyter", "ssh", "devel")
PLATFORMS = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
SEVERITIES = ("LOW", "MEDIUM", "HIGH", "CRITICAL")  # an advisory's, in order (CVSS v3's ratings)
DEFAULT_PLATFORM = "linux/amd64"  # what an entry without `platforms` is built for

# Debian policy 5.6.1 (package names) and 5.6.12 (versions: [epoch:]upstream[-revision]).
APT_PACKAGE = pattern(r"[a-z0-9][a-z0-9+.-]{1,99}(=([0-9]+:)?[0-9][A-Za-z0-9.+~-]{0,99})?")
# The OCI distribution reference grammar (distribution/reference/regexp.go), with an optional digest.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?"
IMAGE_REFERENCE = pattern(
    rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")
# torch, cuda, cudnn, python and ngc values: looked up in the compat data, and written into tags and labels.
VERSION = pattern(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")
# What the image pins (its constraint file): a direct reference may not replace any of it.
PINNED = pattern(r"^(torch|torchvision|torchaudio|triton|nvidia-[a-z0-9-]+|cuda-[a-z0-9-]+)$")
# An entry's name, and the name of each of its images (NAME[-VARIANT][-ARCH]).
NAME = pattern(r"[a-z0-9][a-z0-9._-]{0,79}")
# Docker's tag grammar; the release is the first part of every image tag (RELEASE-NAME[-VARIANT]).
RELEASE_TAG = pattern(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
MAX_TAG = 128  # Docker's tag grammar: the whole tag, RELEASE[-CANDIDATE]-IMAGE
# A repository to push to: lowercase HOST[:PORT]/PATH.
REGISTRY = pattern(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+")
DIGEST = pattern(r"sha256:[0-9a-f]{64}")
# A wheel's file name (PEP 427): NAME-VERSION[-BUILD]-PYTHON-ABI-PLATFORM.whl, one path part.
WHEEL_NAME = pattern(r"[A-Za-z0-9_.]+-[A-Za-z0-9_.+!]+(-[0-9][A-Za-z0-9_]*)?-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+\.whl")
TIMESTAMP = pattern(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")  # UTC, ISO 8601, as `lock` writes it
SHA256_HEX = pattern(r"[0-9a-f]{64}")
PACKAGE_NAME = pattern(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
PACKAGE_VERSION = pattern(r"[A-Za-z0-9.+!_-]{1,64}")
# The pip install step of an image's build a wheel was installed by (templates: keep_pip_report): torch, pip, jupyter...
PIP_STEP = pattern(r"[a-z]{1,20}")
# A line of the wheel lock (torchimages/wheellock.py): NAME==VERSION --hash=sha256:HEX  # [STEP: ]FILE from URL
LOCKED_WHEEL = pattern(f"(?P<name>{PACKAGE_NAME.pattern})==(?P<version>{PACKAGE_VERSION.pattern}) "
                       f"--hash=sha256:(?P<sha>{SHA256_HEX.pattern})  # (?:(?P<step>{PIP_STEP.pattern}): )?"
                       f"(?P<file>[^\\s/]+) from (?P<url>\\S{{1,2000}})")
# One word of what a host needs to run an image: a driver version, or a GPU generation (12.0+PTX).
RUNS_ON_WORD = pattern(r"[0-9]{1,4}(\.[0-9]{1,4}){0,2}(\+PTX)?")
VERSION_KEYS = ("torch", "cuda", "cudnn", "nccl", "python", "ngc")
# specs.ImageSpec.runs_on; min_docker: the oldest Docker engine that pulls the image, where its pushed layers need one
# newer than this tool supports (push.runs_on: zstd layers, engine.ZSTD_PULL_FLOOR)
RUNS_ON_KEYS = ("min_driver", "min_driver_minor_compat", "gpu_archs", "min_docker")
ENGINE_FLOOR = pattern(r"[0-9]{1,4}\.[0-9]{1,4}")
# Unicode categories no value may hold: controls (newline, tab, NUL, ESC), format characters (U+202E
# right-to-left override, zero-width spaces), line and paragraph separators, unassigned code points.
REFUSED_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def architecture(platform: str) -> str:
    """linux/arm64 -> arm64: the word a platform's own image name and tag end with (NAME-arm64)."""
    return platform.rpartition("/")[2]


def control_problem(value: str) -> str | None:
    for index, char in enumerate(value):
        if unicodedata.category(char) in REFUSED_CATEGORIES:
            return (f"holds the control or invisible character U+{ord(char):04X} at position {index + 1}; "
                    "values are one line of visible text")
    return None


def short_line_problem(value: str, limit: int = 100) -> str | None:
    """An id or version another tool wrote (an advisory's): one line of visible text, at most `limit` characters."""
    if len(value) > limit:
        return f"at most {limit} characters, not {len(value)}"
    return control_problem(value)


def reason_problem(value: str) -> str | None:
    """A stated reason (size_growth_reason): a sentence for the reviewer, not a value anything runs."""
    if not value.strip() or len(value) > 300:
        return "is a reason for the size growth: one sentence, at most 300 characters"
    return None


def version_problem(value: str) -> str | None:
    if VERSION.fullmatch(value):
        return None
    return f"'{value}' is not a version: digits, letters, '.', '+', '_' and '-', at most 64 (e.g. \"2.3.1\")"


def apt_problem(value: str) -> str | None:
    if APT_PACKAGE.fullmatch(value):
        return None
    if value.startswith("-"):
        return f"'{value}' is an apt option, not a package; the build decides apt's options"
    return (f"'{value}' is not a Debian package name: lowercase letters, digits, '+', '-', '.', optionally "
            "=VERSION (e.g. 'libgl1' or 'curl=7.88.1-10+deb12u5')")


def image_reference_problem(value: str) -> str | None:
    if IMAGE_REFERENCE.fullmatch(value):
        return None
    return (f"'{value}' is not an image reference: [HOST[:PORT]/]lowercase/path[:TAG][@sha256:DIGEST] "
            "(e.g. debian:bookworm-slim)")


def pip_problem(value: str) -> str | None:
    """A PEP 508 requirement: name, extras, version specifiers, markers; no pip options; https direct references only."""
    if value.lstrip().startswith("-"):
        return f"'{value}' is a pip option, not a requirement; indexes and mirrors are build options (--pip-index-url)"
    if "\\" in value:
        return f"'{value}' holds a backslash; a requirement never needs one"
    # packaging is read here, not at the top: `build.py selfcheck` reads answers through this grammar on a GPU host
    # whose Python has torch, pytest and testinfra, and maybe not packaging
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        requirement = Requirement(value)
    except InvalidRequirement as exc:
        reason = str(exc).splitlines()[0]
        return f"'{value}' is not a PEP 508 requirement ({reason}); e.g. 'transformers>=4.40' or 'timm[extras]==1.0.3'"
    if requirement.url is None:
        return None
    name = canonicalize_name(requirement.name)
    if PINNED.match(name):
        return f"'{value}': {name} is pinned by the image; a direct reference would replace it"
    if urlsplit(requirement.url).scheme != "https":
        return f"'{value}': a direct reference must use https://, so what is installed is what was asked for"
    return None


def requirement_name(value: str) -> str:
    """The canonical project name of a requirement that passed `pip_problem` ('Torch_Vision[x]' -> 'torch-vision')."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    return canonicalize_name(Requirement(value).name)


# An index or mirror URL: it becomes a build argument, and APT_MIRROR a sed replacement ('#', '&' and '\\' would
# change the expression).
URL = pattern(r"https?://[A-Za-z0-9._~%!$'()*+,;=:@-]+(/[A-Za-z0-9._~%!$'()*+,;=:@/-]*)?")


def url_problem(value: str, option: str) -> str | None:
    why = control_problem(value)
    if why:
        return f"{option}: {why}"
    if URL.fullmatch(value) and urlsplit(value).hostname:
        return None
    return f"{option} {value!r} is not an http(s) URL without spaces, '#', '&', '?' or '\\' (e.g. https://mirror.example.com/simple)"


def release_problem(release: str) -> str | None:
    """Why `release` cannot name images (and the report and log folders named after it), or None."""
    if RELEASE_TAG.fullmatch(release):
        return None
    return (f"{visible(release)!r} is not a valid release tag: letters, digits, '_', '.' and '-', starting with a letter, "
            "digit or '_', at most 128 characters (Docker's tag grammar), e.g. v2.7")


def tag_part_problem(value: str) -> str | None:
    """A candidate's name, between the release and the image in a tag (RELEASE-CANDIDATE-IMAGE)."""
    return release_problem(value) and f"{visible(value)!r} is not a tag part: letters, digits, '_', '.' and '-'"


def since_version_problem(value: str) -> str | None:
    """The oldest torch release a compat refresh reads: a version that starts with a digit (2.0)."""
    if RELEASE_TAG.fullmatch(value) and value[0] in "0123456789":
        return None
    return f"{visible(value)!r} is not a version, e.g. 2.0"


def entry_name_problem(value: str) -> str | None:
    """An entry's own name: an image's name is made from it, and a platform's -ARCH may follow it."""
    if not NAME.fullmatch(value):
        return (f"{visible(value)!r} is not a valid image name: lowercase letters, digits, '.', '_' and '-', starting with a "
                "letter or digit, at most 80 characters")
    reserved = next((f"-{architecture(p)}" for p in PLATFORMS if value.endswith(f"-{architecture(p)}")), None)
    if reserved:
        return f"{visible(value)!r} ends with {reserved}, which names a platform's image; choose another name"
    return None


def name_platform(image: str) -> str:
    """The platform an image's name says: the one whose -ARCH ends it, else the default (an entry for it alone)."""
    return next((p for p in PLATFORMS if image.endswith(f"-{architecture(p)}") and len(image) > len(architecture(p)) + 1),
                DEFAULT_PLATFORM)


def without_architecture(image: str, platform: str) -> str | None:
    """The image's name across platforms: NAME[-VARIANT] without its platform's -ARCH; the name itself for an image of
    the default platform without one; None when the name does not say `platform`."""
    suffix = f"-{architecture(platform)}"
    if image.endswith(suffix) and len(image) > len(suffix):
        return image.removesuffix(suffix)
    return image if platform == DEFAULT_PLATFORM and name_platform(image) == DEFAULT_PLATFORM else None


def image_name_problem(value: str) -> str | None:
    """An image's name: its matrix entry's name, or NAME-VARIANT, either with its platform's architecture after it."""
    across = without_architecture(value, name_platform(value)) or value
    base, _, variant = across.rpartition("-")
    if control_problem(value) is None and (NAME.fullmatch(across) or (variant in VARIANTS and NAME.fullmatch(base))):
        return None
    return f"{visible(value)!r} is not an image name: lowercase letters, digits, '.', '_' and '-' (e.g. cu121-ssh)"


def platform_problem(value: str) -> str | None:
    return None if value in PLATFORMS else f"{visible(value)!r} is not a platform: {', '.join(PLATFORMS)}"


def image_platform_problem(image: str, platform: str) -> str | None:
    """A recorded platform that disagrees with the image's name (NAME-arm64 is the linux/arm64 image; a name without a
    platform's -ARCH is the default platform's): an index would send one platform's hosts the other's image."""
    said = name_platform(image)
    if platform == said:
        return None
    return (f"{visible(platform)!r} is not the platform the name {visible(image)!r} says ({said}); an image of "
            f"{platform} is named NAME[-VARIANT]-{architecture(platform)}")


def repository_problem(value: str) -> str | None:
    if REGISTRY.fullmatch(value):
        return None
    return f"{visible(value)!r} is not a repository: lowercase HOST[:PORT]/PATH (e.g. registry.example.com/ml/pytorch)"


def version_value_problem(value: object) -> str | None:
    """A recorded version: a version string, or null where it does not apply (a CPU image's cuda)."""
    if value is None:
        return None
    if not isinstance(value, str):
        return "must be a version string or null"
    return control_problem(value) or version_problem(value)


def version_key_problem(key: str) -> str | None:
    return None if key in VERSION_KEYS else f"is not one of {', '.join(VERSION_KEYS)}"


def runs_on_key_problem(key: str) -> str | None:
    return None if key in RUNS_ON_KEYS else f"is not one of {', '.join(RUNS_ON_KEYS)}"


def runs_on_value_problem(value: object) -> str | None:
    """'none', a driver version (580.95.05) or GPU generations ('7.5 8.0 12.0+PTX')."""
    if not isinstance(value, str):
        return "must be a string"
    if value == "none" or (0 < len(value) <= 200 and all(RUNS_ON_WORD.fullmatch(w) for w in value.split(" "))):
        return None
    return f"{visible(value)[:60]!r} is not 'none', a driver version or GPU generations (e.g. 7.5 8.0 12.0+PTX)"


def engine_floor_problem(value: object) -> str | None:
    """A Docker engine release a pull needs, as MAJOR.MINOR (23.0)."""
    if isinstance(value, str) and ENGINE_FLOOR.fullmatch(value):
        return None
    return f"{visible(str(value))[:40]!r} is not a Docker engine release (MAJOR.MINOR, e.g. 23.0)"


def count_problem(value: object) -> str | None:
    """A whole number of 0 or more (a bool is not one, as JSON's true is not 1)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return "must be a whole number of 0 or more"
    return None


def number_problem(value: object) -> str | None:
    """A measured figure (seconds, bytes): a number of 0 or more, or null."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return "must be a number of 0 or more"
    return None


def package_kind_problem(key: str) -> str | None:
    """A package kind (a purl type: deb, pypi)."""
    return None if key.isascii() and key.isalnum() and len(key) <= 32 else "is not a package kind (e.g. deb, pypi)"


def digest_problem(value: str) -> str | None:
    if DIGEST.fullmatch(value):
        return None
    return f"{visible(value)!r} is not a digest: 'sha256:' and 64 lowercase hex digits"


def package_name_problem(value: str) -> str | None:
    """A distribution's name as its metadata gives it (nvidia-cudnn-cu12, PyYAML)."""
    return None if PACKAGE_NAME.fullmatch(value) else f"{visible(value)[:80]!r} is not a package name"


def package_version_problem(value: str) -> str | None:
    """A distribution's version as its metadata gives it (2.13.0+cpu, 1.0rc1): no space, no control character."""
    return None if PACKAGE_VERSION.fullmatch(value) else f"{visible(value)[:80]!r} is not a package version"


def locked_wheel_problem(line: object) -> str | None:
    """A line of the wheel lock, as torchimages.wheellock writes it (its file a wheel's name)."""
    match = LOCKED_WHEEL.fullmatch(line) if isinstance(line, str) else None
    if match and not wheel_name_problem(match["file"]):
        return None
    return f"{visible(str(line))[:120]!r} is not a locked wheel (NAME==VERSION --hash=sha256:HEX  # [STEP: ]FILE from URL)"


def locked_wheels_problem(lines: object) -> str | None:
    if not isinstance(lines, list):
        return "must be a list of locked wheels"
    return next((why for line in lines if (why := locked_wheel_problem(line))), None)


def wheel_name_problem(value: str) -> str | None:
    if WHEEL_NAME.fullmatch(value) and len(value) <= 255:
        return None
    return f"{visible(value)[:80]!r} is not a wheel's file name (NAME-VERSION-PYTHON-ABI-PLATFORM.whl)"


def timestamp_problem(value: str) -> str | None:
    if TIMESTAMP.fullmatch(value):
        return None
    return f"{visible(value)[:60]!r} is not a UTC time: YYYY-MM-DDTHH:MM:SSZ (e.g. 2026-12-05T13:00:00Z)"


def sha256_problem(value: str) -> str | None:
    if SHA256_HEX.fullmatch(value):
        return None
    return f"{visible(value)!r} is not a sha256: 64 lowercase hex digits"


def relative_path_problem(value: str) -> str | None:
    """A path a file names beside itself: relative, no '..' or '.' part, no backslash or control character."""
    if (not value or value.startswith("/") or "\\" in value or any(part in ("..", ".") for part in value.split("/"))
            or control_problem(value)):
        return f"{visible(value)!r} is not a path inside the file's folder: relative, without '..' (e.g. v2.7.sbom/x.spdx.json)"
    return None


def text_problem(value: object, check: Check) -> str | None:
    """A value read from a file that must be a string passing `check` (and one line of visible text)."""
    if not isinstance(value, str):
        return "must be a string"
    return control_problem(value) or check(value)


def optional_problem(value: object, check: Check) -> str | None:
    return None if value is None else text_problem(value, check)


MATERIAL_FIELDS = ("dockerfile", "dockerfile_sha256", "from", "from_id", "wheels", "indexes", "engine")
# Recorded since releases are rebuilt layer for layer (build --from-release): absent in older reports
LATER_MATERIAL_FIELDS = ("source_date_epoch",)


def epoch_problem(value: object) -> str | None:
    """SOURCE_DATE_EPOCH: the seconds since 1970 a build gave its environment's files (a whole number, as JSON's true
    is not 1; before 2106, as tar's and most file systems' times are)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        return "must be a whole number of seconds since 1970 (SOURCE_DATE_EPOCH), from 0 to 4294967295"
    return None


def materials_problem(materials: object) -> str | None:
    """What a build read, as its provenance will say: every value through the grammar (a wheel by its file name and
    sha256, an index URL without credentials, the FROM image by reference and ID)."""
    if not isinstance(materials, dict) or not set(MATERIAL_FIELDS) <= set(materials) <= {*MATERIAL_FIELDS,
                                                                                       *LATER_MATERIAL_FIELDS}:
        return (f"must be an object of exactly {', '.join(MATERIAL_FIELDS)} (and, from later builds, "
                f"{', '.join(LATER_MATERIAL_FIELDS)})")
    wheels, indexes = materials["wheels"], materials["indexes"]
    problems = [
        text_problem(materials["dockerfile"], lambda v: None if v in ("Dockerfile", "Dockerfile.buildkit") else
                     "is not Dockerfile or Dockerfile.buildkit"),
        text_problem(materials["dockerfile_sha256"], sha256_problem),
        None if materials["from"] == "" else text_problem(materials["from"], image_reference_problem),
        optional_problem(materials["from_id"], digest_problem),
        text_problem(materials["engine"], version_problem),
        None if isinstance(wheels, dict) else "wheels must be an object of file name -> sha256",
        None if isinstance(indexes, list) else "indexes must be a list of URLs",
    ]
    if "source_date_epoch" in materials and (why := epoch_problem(materials["source_date_epoch"])):
        problems.append(f"source_date_epoch {why}")
    if isinstance(wheels, dict):
        problems += [text_problem(name, wheel_name_problem) or text_problem(sha, sha256_problem)
                     for name, sha in wheels.items()]
    if isinstance(indexes, list):
        problems += [text_problem(url, lambda v: url_problem(v, "index")) for url in indexes]
    return next((f"materials: {why}" for why in problems if why), None)


AUDIT_FIELDS = ("status", "fail_on", "source", "findings", "problems")
AUDIT_STATUSES = ("passed", "failed", "not checked")
FINDING_FIELDS = ("id", "aliases", "ecosystem", "package", "installed", "fixed", "severity", "allowed_by")
MAX_FINDINGS = 10_000


def audit_problem(audit: object) -> str | None:
    """An image's audit as the report and the release manifest record it (verify/auditstage.py): its status, the
    level it failed on, where the advisories came from, each finding and each line that failed it; a "failed" audit
    names at least one line, a "passed" or "not checked" one none."""
    if not isinstance(audit, dict) or set(audit) != set(AUDIT_FIELDS):
        return f"audit: must be an object of exactly {', '.join(AUDIT_FIELDS)}"
    findings, lines = audit["findings"], audit["problems"]
    if not isinstance(findings, list) or not isinstance(lines, list) or max(len(findings), len(lines)) > MAX_FINDINGS:
        return f"audit: findings and problems must be lists of at most {MAX_FINDINGS}"
    problems = [
        None if audit["status"] in AUDIT_STATUSES else f"status must be one of {', '.join(AUDIT_STATUSES)}",
        None if audit["fail_on"] in SEVERITIES else f"fail_on must be one of {', '.join(SEVERITIES)}",
        optional_problem(audit["source"], lambda value: short_line_problem(value, 1000)),
        None if bool(lines) == (audit["status"] == "failed") else "a failed audit names what failed it, no other does",
        *(text_problem(line, lambda value: short_line_problem(value, 1000)) for line in lines),
        *(finding_problem(finding) for finding in findings),
    ]
    return next((f"audit: {why}" for why in problems if why), None)


def finding_problem(finding: object) -> str | None:
    """One advisory that affects one installed package, as recorded: every value a short line of visible text."""
    if not isinstance(finding, dict) or set(finding) != set(FINDING_FIELDS):
        return f"each finding must be an object of exactly {', '.join(FINDING_FIELDS)}"
    aliases = finding["aliases"]
    if not isinstance(aliases, list) or len(aliases) > 100:
        return "a finding's aliases must be a list of at most 100"
    problems = [text_problem(finding[key], short_line_problem) for key in ("id", "ecosystem", "package", "installed")]
    problems += [optional_problem(finding[key], short_line_problem) for key in ("fixed", "allowed_by")]
    problems += [text_problem(alias, short_line_problem) for alias in aliases]
    if finding["severity"] is not None and finding["severity"] not in SEVERITIES:
        problems.append(f"a finding's severity must be one of {', '.join(SEVERITIES)}, or null")
    return next((f"finding {visible(str(finding['id']))[:100]!r}: {why}" for why in problems if why), None)


RULES: dict[str, Check] = {"release": release_problem}  # what scripts ask: python -m torchimages.input.grammar KIND VALUE


if __name__ == "__main__":  # scripts/release-assets.sh asks the same rule the code uses
    kind, given = sys.argv[1:3]
    why = RULES[kind](given)
    if why:
        print(why, file=sys.stderr)
    sys.exit(1 if why else 0)
