"""The grammar of every matrix value that reaches a Dockerfile, a shell or a path.

Each check returns why a value is refused (with what would be valid), or None. The loader runs
them on every entry before compatibility is checked, so a hostile value never reaches the
template; the template still shell-quotes what it interpolates into RUN lines (a second defence:
a PEP 508 marker legitimately holds quotes and `;`).
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

# Debian policy 5.6.1 (package names) and 5.6.12 (versions: [epoch:]upstream[-revision]).
APT_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]{1,99}(=([0-9]+:)?[0-9][A-Za-z0-9.+~-]{0,99})?")
# The OCI distribution reference grammar (distribution/reference/regexp.go), with an optional digest.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?"
IMAGE_REFERENCE = re.compile(
    rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")
# torch, cuda, cudnn, python and ngc values: looked up in the compat data, and written into tags and labels.
VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")
# What the image pins (its constraint file): a direct reference may not replace any of it.
PINNED = re.compile(r"^(torch|torchvision|torchaudio|triton|nvidia-[a-z0-9-]+|cuda-[a-z0-9-]+)$")
# Unicode categories no value may hold: controls (newline, tab, NUL, ESC), format characters (U+202E
# right-to-left override, zero-width spaces), line and paragraph separators, unassigned code points.
REFUSED_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def control_problem(value: str) -> str | None:
    for index, char in enumerate(value):
        if unicodedata.category(char) in REFUSED_CATEGORIES:
            return (f"holds the control or invisible character U+{ord(char):04X} at position {index + 1}; "
                    "values are one line of visible text")
    return None


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
    return canonicalize_name(Requirement(value).name)


# An index or mirror URL: it becomes a build argument, and APT_MIRROR a sed replacement ('#', '&' and '\\' would
# change the expression).
URL = re.compile(r"https?://[A-Za-z0-9._~%!$'()*+,;=:@-]+(/[A-Za-z0-9._~%!$'()*+,;=:@/-]*)?")


def url_problem(value: str, option: str) -> str | None:
    why = control_problem(value)
    if why:
        return f"{option}: {why}"
    if URL.fullmatch(value) and urlsplit(value).hostname:
        return None
    return f"{option} {value!r} is not an http(s) URL without spaces, '#', '&', '?' or '\\' (e.g. https://mirror.example.com/simple)"
