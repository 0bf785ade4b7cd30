"""`build.py fit`: which images of a matrix run on a host (a driver, a GPU, a platform), and why the others do not.

The rule is templates/files/gpurules.py, the file every image carries for image-doctor: fit loads that same file,
so the answer before the pull and the doctor's inside the container cannot differ.
"""

from __future__ import annotations

import importlib.util
import platform as host_platform
import re
from dataclasses import dataclass, replace
from functools import cache
from types import ModuleType

from ..engine import engine_release
from ..errors import UserError, visible
from ..input import compat
from ..input.grammar import PLATFORMS
from ..input.specs import ImageSpec, Plan
from ..manifest import ManifestImage, ReleaseManifest
from ..settings import SETTINGS


@cache
def rules() -> ModuleType:
    """templates/files/gpurules.py, loaded from the checkout as the images carry it."""
    path = SETTINGS.root / "templates" / "files" / "gpurules.py"
    loaded = importlib.util.spec_from_file_location("gpurules", path)
    if loaded is None or loaded.loader is None:
        raise UserError(f"cannot load the host rules from {path}")
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Host:
    """The machine asked about: its platform, driver and one GPU (a compute capability, and a name where known).

    The driver and the capability are as given, or as nvidia-smi answered them: an answer that is not a version or a
    capability ('[Insufficient Permissions]') is kept, for the rules to say it is not known and what was answered.
    """

    platform: str
    driver: str | None
    capability: str | None
    gpu_name: str | None = None
    source: str = "given"  # 'given' on the command line, or 'nvidia-smi'
    docker: str | None = None  # its Docker engine's version (--docker), for images whose pull needs a newer one

    def known_driver(self) -> str | None:
        return rules().driver_version(self.driver)

    def known_capability(self) -> str | None:
        return self.capability if rules().capability_of(self.capability) else None

    def unreadable(self) -> dict[str, str]:
        """nvidia-smi's answers that are no driver version or no compute capability, by what was asked."""
        answers = {"driver": (self.driver, self.known_driver()), "capability": (self.capability, self.known_capability())}
        return {asked: answer for asked, (answer, known) in answers.items() if answer is not None and known is None}

    def describe(self) -> str:
        gpu = f"compute capability {self.known_capability() or 'unknown'}"
        gpu += f" ({self.gpu_name})" if self.gpu_name else ""
        docker = f", Docker {self.docker}" if self.docker else ""
        return f"{gpu}, driver {self.known_driver() or 'unknown'}{docker}, {self.platform} ({self.source})"

    def as_json(self) -> dict[str, object]:
        """The host as decided with: what is not known is null, and what nvidia-smi answered for it is under
        'unreadable'."""
        return {"platform": self.platform, "driver": self.known_driver(), "capability": self.known_capability(),
                "gpu_name": self.gpu_name, "docker": self.docker, "source": self.source, "unreadable": self.unreadable()}


@dataclass(frozen=True)
class Fit:
    """One entry's images on one platform against the host: whether they run and every reason."""

    entry: str
    variants: tuple[str, ...]  # base first
    images: tuple[str, ...]  # the image of each variant on `platform`
    platform: str
    gpu: bool  # a CUDA image (a CPU image runs anywhere of its platform, without the GPU)
    verdict: str  # runs | unknown | fails (gpurules.verdict)
    reasons: tuple[tuple[str, str], ...]  # (runs | warns | unknown | fails, the reason in words)
    pull: str | None = None  # a release manifest's tag to pull (an image index's for several platforms)
    signed_by: str | None = None  # the fingerprint of the key the pulled tag was signed with, per the manifest

    @property
    def runs(self) -> bool:
        return self.verdict == "runs"

    def as_json(self) -> dict[str, object]:
        return {"entry": self.entry, "images": list(self.images), "platform": self.platform, "gpu": self.gpu,
                "verdict": self.verdict, "reasons": [{"kind": kind, "reason": text} for kind, text in self.reasons],
                "pull": self.pull, "signed_by": self.signed_by}


def this_platform() -> str:
    return rules().platform_of(host_platform.machine())


def host_from(driver: str | None, gpu: str | None, platform: str | None, docker: str | None = None) -> Host:
    """The host from the options; what they leave out is read from nvidia-smi here. Bad values are refused (exit 2)."""
    if docker is not None and engine_release(docker) is None:
        raise UserError(f"--docker {visible(docker)[:40]!r}: not a Docker engine version (`docker version` prints it as "
                        "the server's Version, e.g. 20.10.24 or 27.3.1)")
    return replace(host_of(driver, gpu, platform), docker=docker)


def host_of(driver: str | None, gpu: str | None, platform: str | None) -> Host:
    if platform is not None and platform not in PLATFORMS:
        raise UserError(f"--platform {platform}: not a platform the matrix knows; valid: {', '.join(PLATFORMS)}")
    if driver is not None and rules().driver_version(driver) != driver:
        raise UserError(f"--driver {driver!r}: not a driver version: digits 0-9 as nvidia-smi prints it, "
                        "e.g. 535.104.05 or 580")
    platform = platform or this_platform()
    if driver is not None and gpu is not None:
        capability, name = gpu_capability(gpu)
        return Host(platform, driver, capability, name)
    gpus = rules().nvidia_smi()
    if not gpus:
        raise UserError("no GPU found here (nvidia-smi listed none): give the host as --driver VERSION "
                        "--gpu CAPABILITY|NAME, e.g. --driver 535.104.05 --gpu 8.9")
    first = gpus[0]
    capability, name = gpu_capability(gpu) if gpu is not None else listed_capability(first)
    return Host(platform, driver or first["driver"], capability, name, source="nvidia-smi")


def listed_capability(gpu: dict) -> tuple[str | None, str | None]:
    """The compute capability and name of a GPU nvidia-smi listed: its answer, or where that is no capability (drivers
    before R510, '[Unknown Error]') the compat data's for its name; else the answer, which the rules call unknown."""
    if gpu["capability"] and rules().capability_of(gpu["capability"]):
        return gpu["capability"], gpu["name"]
    named = capability_by_name(gpu["name"] or "")
    return (named[0], gpu["name"]) if named else (gpu["capability"], gpu["name"])


def gpu_capability(gpu: str) -> tuple[str, str | None]:
    """'8.9' -> ('8.9', None); 'L4' or 'NVIDIA L4' -> ('8.9', 'L4'), by the compat data's GPU names."""
    if rules().capability_of(gpu):
        return gpu.strip(), None
    named = capability_by_name(gpu)
    if named is None:
        raise UserError(f"--gpu {gpu!r}: not a compute capability (MAJOR.MINOR in digits 0-9, e.g. 8.9) nor a GPU the "
                        f"compat data names; known: {', '.join(sorted(dict(compat.load().gpus)))}")
    return named


def capability_by_name(text: str) -> tuple[str, str] | None:
    """(capability, the compat data's name) of the GPU `text` names ('NVIDIA L40S' -> ('8.9', 'L40S')), or None."""
    known = dict(compat.load().gpus)
    # a model name ends where a letter or digit does not follow: "A100-SXM4-80GB" is an A100, "L40S" is no L40
    found = [name for name in known
             if re.search(rf"(?<![\w-]){re.escape(name)}(?![A-Za-z0-9])", text, re.IGNORECASE | re.ASCII)]
    if not found:
        return None
    name = max(found, key=len)  # 'L40S' over 'L40', 'RTX PRO 6000' over a shorter match
    return known[name], name


def entry_fit(spec: ImageSpec, platform: str, host: Host) -> Fit:
    gpurules = rules()
    facts = spec.host_facts()
    found = gpurules.findings(facts, host.platform, {"capability": host.capability, "name": host.gpu_name},
                              host.driver)
    mine = [image for image in spec.platform_images() if image.platform == platform]
    return Fit(spec.name, tuple(i.variant for i in mine), tuple(i.image for i in mine), platform, bool(spec.cuda),
               gpurules.verdict(found), tuple(found))


def fits(plan: Plan, host: Host) -> list[Fit]:
    """Each entry against the host: the entry's image of the host's platform, or its first one, refused for its
    platform."""
    found = []
    for spec in plan.specs:
        platform = host.platform if host.platform in spec.platforms else spec.platforms[0]
        found.append(entry_fit(spec, platform, host))
    return found


def manifest_facts(image: ManifestImage) -> dict[str, object]:
    """What gpurules decides with, for one platform's image of a release tag in a release manifest: its versions, and
    what it records it needs (runs_on; absent from older manifests). Each platform's image records its own: a tag is
    judged by the image of the host's platform, never by another platform's."""
    versions = image.versions
    known = {key: value for key, value in (image.runs_on or {}).items() if value != "none"}
    flavor = "ngc" if versions.get("ngc") else "cuda" if versions.get("cuda") else "cpu"
    return {"flavor": flavor, "cuda": versions.get("cuda"), "min_driver": known.get("min_driver"),
            "min_driver_minor_compat": known.get("min_driver_minor_compat"), "platforms": [image.platform],
            "gpu_archs": {image.platform: known["gpu_archs"]} if "gpu_archs" in known else {}}


def tag_images(manifest: ReleaseManifest, name: str, items: list[ManifestImage]) -> list[ManifestImage]:
    """The images the tag of `name` pulls: those its image index lists where it has one (an index may list fewer
    platforms than the manifest holds images of), else `items`, each under its own tag."""
    index = next((index for index in manifest.indexes if index.name == name), None)
    if index is None:
        return items
    listed = set(index.platforms)
    return [item for item in items if (item.platform, item.image) in listed]


def tag_fit(manifest: ReleaseManifest, name: str, items: list[ManifestImage], host: Host) -> Fit:
    """One release tag against the host, by its image of the host's platform; a tag without one does not run."""
    gpurules = rules()
    indexed = any(index.name == name for index in manifest.indexes)
    pulled = tag_images(manifest, name, items)
    mine = next((item for item in pulled if item.platform == host.platform), None)
    shown = mine or (pulled or items)[0]
    if mine is None:
        reasons = [gpurules.platform_finding(host.platform, [item.platform for item in pulled])]
    else:
        reasons = gpurules.findings(manifest_facts(mine), host.platform,
                                    {"capability": host.capability, "name": host.gpu_name}, host.driver)
        if pulls := engine_finding(mine, host):
            reasons.append(pulls)
    index = next((index for index in manifest.indexes if index.name == name), None)
    signature = index.signature if index else shown.signature
    return Fit(name, (shown.variant,), (mine.image,) if mine else (), shown.platform, bool(shown.versions.get("cuda")),
               gpurules.verdict(reasons), tuple(reasons),
               pull=f"{manifest.repository}:{manifest.pushed_tag(name if indexed else shown.image)}",
               signed_by=manifest.signed_by.fingerprint if signature and manifest.signed_by else None)


def engine_finding(image: ManifestImage, host: Host) -> tuple[str, str] | None:
    """Whether the host's Docker engine pulls the image: its layers may need a newer one than any this tool supports
    (runs_on's min_docker, recorded at push from the layers the registry holds: zstd needs Docker 23.0)."""
    floor = (image.runs_on or {}).get("min_docker")
    if floor is None:  # gzip layers: every engine this tool supports pulls them
        return None
    found, needed = engine_release(host.docker or ""), engine_release(floor)
    if found is None or needed is None:
        return "unknown", (f"its layers need Docker {floor} or later to pull (zstd): give the host's as --docker VERSION "
                           "(`docker version`, the server's)")
    if found < needed:
        return "fails", f"its layers need Docker {floor} or later to pull (zstd); this host's is {host.docker}"
    return "runs", f"its layers need Docker {floor} or later to pull (zstd); this host's is {host.docker}"


def manifest_fits(manifest: ReleaseManifest, host: Host) -> list[Fit]:
    """Each release tag of a release manifest against the host (an image index's platforms are one tag)."""
    names: dict[str, list[ManifestImage]] = {}
    for item in manifest.images:
        names.setdefault(item.name, []).append(item)
    return [tag_fit(manifest, name, items, host) for name, items in names.items()]


def render_text(found: list[Fit], host: Host, source: str) -> str:
    lines = [f"fit: {host.describe()}; the images of {source}"]
    for verdict, title in (("runs", "runs here"), ("unknown", "cannot tell"), ("fails", "does not run here")):
        group = [f for f in found if f.verdict == verdict]
        if not group and verdict == "unknown":
            continue
        lines.append(f"{title}: {len(group)}")
        for fit in group:
            lines.append(f"  {fit.entry} [{fit.platform}] ({', '.join(fit.variants)})"
                         + (f": {fit.pull}" if fit.pull else "") + signed_words(fit))
            lines += [f"    {'warning: ' if kind == 'warns' else ''}{text}" for kind, text in fit.reasons
                      if kind != "runs" or fit.runs]
    if not any(f.runs and f.gpu for f in found):
        lines.append("no CUDA image of these runs on this host")
    if unreadable := host.unreadable():
        asked = " and ".join(UNREADABLE[what][0] for what in unreadable)
        options = " ".join(UNREADABLE[what][1] for what in unreadable)
        lines.append(f"nvidia-smi could not tell {asked}: give {options}")
    return "\n".join(lines)


def signed_words(fit: Fit) -> str:
    """Whether the release manifest says the tag was signed (build.py verify checks it in the registry)."""
    if fit.pull is None:
        return ""
    return f" (signed, key {fit.signed_by[:19]}...)" if fit.signed_by else " (not signed)"


UNREADABLE = {"driver": ("the driver version", "--driver VERSION"),  # Host.unreadable()'s keys: words and options
              "capability": ("the compute capability", "--gpu CAPABILITY|NAME")}


def exit_code(found: list[Fit]) -> int:
    """0 when a CUDA image runs (a CPU image runs anywhere and answers nothing about the GPU), else 1."""
    return 0 if any(f.runs and f.gpu for f in found) else 1
