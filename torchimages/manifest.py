"""The release manifest: what a release, or a release's candidates, holds, image by image. Read and written here only.

push and `build.py manifest` make one from build reports, promote makes the release's from the candidates', and
`--previous`, `--cache-from previous` and `diff` read one that was downloaded as a release asset. So a manifest is
input like the matrix: `read` checks its shape, every value's grammar, and derives what can be derived instead of
trusting it — each image's tags and its pinned reference follow from the release, the candidate, the repository, the
image name and the digest, and a file that says otherwise is refused. SBOMs are files beside the manifest
(MANIFEST.sbom/IMAGE.spdx.json): a path that leaves that folder is refused, and an SBOM's bytes are checked against
its sha256 whenever they are read.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from .checkedjson import Fields
from .errors import UserError, visible
from .files import atomic_write, beside, check_output_file, contained, load, output_file_problem
from .input.grammar import (
    DEFAULT_PLATFORM,
    MAX_TAG,
    RUNS_ON_KEYS,
    VARIANTS,
    VERSION_KEYS,
    audit_problem,
    count_problem,
    digest_problem,
    engine_floor_problem,
    epoch_problem,
    image_name_problem,
    image_platform_problem,
    image_reference_problem,
    locked_wheels_problem,
    package_kind_problem,
    pattern,
    platform_problem,
    relative_path_problem,
    release_problem,
    repository_problem,
    runs_on_key_problem,
    runs_on_value_problem,
    sha256_problem,
    tag_part_problem,
    version_key_problem,
    version_value_problem,
    without_architecture,
)
from .input.specs import Release, image_tag
from .report import AuditStage

MAX_LOCK = 4 << 20  # a wheel lock of a CUDA image is some kB

IMAGE_FIELDS = ("image", "variant", "tag", "release_tag", "reference", "digest", "size_bytes", "layers", "versions",
                "content_digest", "smoke", "sbom", "platform", "runs_on", "signature", "wheels", "built_from",
                "source_date_epoch", "audit")
TOP_FIELDS = ("release", "candidate", "promoted_from", "repository", "images", "indexes", "signed_by")
INDEX_FIELDS = ("name", "release_tag", "reference", "digest", "platforms", "signature")
SIGNED_BY_FIELDS = ("fingerprint", "public_key")
SMOKE_FIELDS = ("passed", "failed", "skipped", "skipped_no_gpu")


@dataclass(frozen=True)
class SbomFile:
    """An image's SBOM: where the file is, the sha256 of its bytes, how many packages of each kind it lists."""

    file: Path
    sha256: str
    packages: dict[str, int] = field(default_factory=dict)

    def read(self, image: str) -> bytes:
        """Its bytes, once they match its sha256."""
        try:
            content = self.file.read_bytes()
        except OSError as exc:
            raise UserError(f"{self.file}: the SBOM of {image} could not be read ({exc.strerror or exc}); keep the "
                            "RELEASE.sbom/ folder beside its manifest or report") from None
        if hashlib.sha256(content).hexdigest() != self.sha256:
            raise UserError(f"{self.file}: the SBOM of {image} does not match its sha256 {self.sha256} (it changed "
                            "after it was recorded, or it is another file)")
        return content


@dataclass(frozen=True)
class SmokeCounts:
    passed: int
    failed: int
    skipped: int
    skipped_no_gpu: int


@dataclass(frozen=True)
class ManifestImage:
    image: str
    variant: str
    digest: str  # the manifest digest the registry confirmed
    versions: dict[str, str | None]
    smoke: SmokeCounts
    size_bytes: int | None = None
    layers: int | None = None
    content_digest: str | None = None
    sbom: SbomFile | None = None
    platform: str = DEFAULT_PLATFORM
    runs_on: dict[str, str] | None = None  # what a host needs (specs.ImageSpec.runs_on); None in older manifests
    signature: str | None = None  # the digest of its signature manifest (sha256-HEX.sig), when it was signed
    wheels: tuple[str, ...] | None = None  # its wheel lock (torchimages.wheellock), a line a wheel: MANIFEST.wheels/IMAGE.txt
    built_from: BuiltFrom | None = None  # a base image's FROM image, as its build named and found it
    source_date_epoch: int | None = None  # the time its build gave the environment's files; None in older manifests
    audit: dict[str, object] | None = None  # its packages against known advisories (grammar.AUDIT_FIELDS); None: not run

    @property
    def name(self) -> str:
        """The image across its platforms: what its image index is named (the manifest reader checked the suffix)."""
        return without_architecture(self.image, self.platform) or self.image


@dataclass(frozen=True)
class BuiltFrom:
    """The image a release's base image was built FROM: the reference its build gave (pinned by digest where the
    matrix's lock or --base-image pinned it) and the ID that image had on the build's engine. A rebuild of the release
    (`build --from-release`) builds FROM the same reference and refuses an image of another ID."""

    image: str
    id: str | None


@dataclass(frozen=True)
class ManifestIndex:
    """An image index of a release: one release tag (RELEASE-NAME) for an image's platforms, each platform's manifest
    referenced by digest; `digest` is the index's own."""

    name: str
    digest: str
    platforms: tuple[tuple[str, str], ...]  # (platform, image) in the order the index lists them
    signature: str | None = None  # the digest of its signature manifest, when it was signed


@dataclass(frozen=True)
class SignedBy:
    """The key a release's images and indexes were signed with: its public half (PEM) and its fingerprint."""

    fingerprint: str
    public_key: str


@dataclass(frozen=True)
class ReleaseManifest:
    release: str
    repository: str
    images: tuple[ManifestImage, ...]
    candidate: str | None = None  # a candidates' manifest: its images are under RELEASE-CANDIDATE-IMAGE
    promoted_from: str | None = None  # a release's manifest: the candidate its tags were promoted from
    indexes: tuple[ManifestIndex, ...] = ()  # a release's image indexes, one per image built for several platforms
    signed_by: SignedBy | None = None  # the key its signatures and attestations verify with

    @property
    def pushed(self) -> Release:
        return Release(self.release, self.candidate)

    def pushed_tag(self, image: str) -> str:
        """The tag an image is under in this manifest: its candidate tag, or its release tag."""
        return self.pushed.image_tag(image)

    def release_tag(self, image: str) -> str:
        return image_tag(self.release, image)

    def reference(self, item: ManifestImage) -> str:
        """What users pin: REPOSITORY@DIGEST."""
        return f"{self.repository}@{item.digest}"

    def by_name(self) -> dict[str, ManifestImage]:
        return {item.image: item for item in self.images}

    def promoted(self) -> ReleaseManifest:
        """The release's manifest once every candidate tag is a release tag: the same images and digests."""
        return replace(self, candidate=None, promoted_from=self.candidate)

    def to_json(self, sbom_paths: dict[str, str], wheels_paths: dict[str, str] | None = None) -> dict[str, object]:
        """The file's content; `sbom_paths`, `wheels_paths`: image -> its SBOM's, its wheel lock's path relative to the
        manifest."""
        images = []
        for item in self.images:
            entry: dict[str, object] = {
                "image": item.image, "variant": item.variant, "tag": f"{self.repository}:{self.pushed_tag(item.image)}",
                "release_tag": f"{self.repository}:{self.release_tag(item.image)}", "reference": self.reference(item),
                "digest": item.digest, "size_bytes": item.size_bytes, "layers": item.layers, "versions": item.versions,
                "content_digest": item.content_digest, "smoke": vars(item.smoke), "platform": item.platform}
            if item.runs_on:
                entry["runs_on"] = item.runs_on
            if item.signature:
                entry["signature"] = item.signature
            if item.sbom:
                entry["sbom"] = {"path": sbom_paths[item.image], "sha256": item.sbom.sha256,
                                 "packages": item.sbom.packages}
            if item.built_from:
                entry["built_from"] = vars(item.built_from)
            if item.source_date_epoch is not None:
                entry["source_date_epoch"] = item.source_date_epoch
            if item.audit is not None:
                entry["audit"] = item.audit
            if item.wheels is not None and wheels_paths:
                entry["wheels"] = {"path": wheels_paths[item.image], "count": len(item.wheels),
                                   "sha256": hashlib.sha256(lock_bytes(item.wheels)).hexdigest()}
            images.append(entry)
        data: dict[str, object] = {"release": self.release, "candidate": self.candidate, "repository": self.repository,
                                   "images": images}
        if self.promoted_from:
            data["promoted_from"] = self.promoted_from
        if self.indexes:
            data["indexes"] = [{"name": index.name, "release_tag": f"{self.repository}:{self.release_tag(index.name)}",
                                "reference": f"{self.repository}@{index.digest}", "digest": index.digest,
                                "platforms": dict(index.platforms),
                                **({"signature": index.signature} if index.signature else {})} for index in self.indexes]
        if self.signed_by:
            data["signed_by"] = vars(self.signed_by)
        return data


def read(path: Path) -> ReleaseManifest:
    """A release or candidates' manifest, every field checked; anything else is one UserError naming the file,
    the image and the field."""
    top = Fields(str(path), load(path, "a release manifest"), allowed=TOP_FIELDS)
    manifest = ReleaseManifest(release=top.required_text("release", release_problem),
                               candidate=top.text("candidate", tag_part_problem, optional=True),
                               promoted_from=top.text("promoted_from", tag_part_problem, optional=True),
                               repository=top.required_text("repository", repository_problem), images=())
    if manifest.candidate and len(manifest.pushed.name) > MAX_TAG:
        top.refuse("candidate", f"release and candidate make a tag longer than {MAX_TAG} characters")
    images = [read_image(Fields(str(path), data, where, allowed=IMAGE_FIELDS), manifest, path.parent)
              for where, data in top.objects("images")]
    names = [item.image for item in images]
    if len(set(names)) != len(names):
        top.refuse("images", f"names {next(n for n in names if names.count(n) > 1)!r} twice; each image once")
    indexes = [read_index(Fields(str(path), data, where, allowed=INDEX_FIELDS), manifest, images)
               for where, data in top.objects("indexes")] if top.value("indexes", optional=True) is not None else []
    if indexes and manifest.candidate:
        top.refuse("indexes", "a candidates' manifest holds no image index: promote writes them")
    return replace(manifest, images=tuple(images), indexes=tuple(indexes), signed_by=read_signed_by(top))


def read_signed_by(top: Fields) -> SignedBy | None:
    """The signing key's public half and fingerprint; the fingerprint is derived from the key, never believed."""
    signed = top.sub("signed_by", SIGNED_BY_FIELDS, optional=True)
    if signed is None:
        return None
    fingerprint = signed.required_text("fingerprint", digest_problem)
    value = signed.value("public_key", optional=False)
    pem = value if isinstance(value, str) else ""
    der = public_key_der(pem)
    if der is None:
        signed.refuse("public_key", "is not a PEM public key (-----BEGIN PUBLIC KEY----- ...)")
    if f"sha256:{hashlib.sha256(der).hexdigest()}" != fingerprint:
        signed.refuse("fingerprint", f"{fingerprint} is not the fingerprint of the public key given with it")
    return SignedBy(fingerprint, pem)


PEM_LINE = pattern(r"[A-Za-z0-9+/=]{1,76}")


def public_key_der(pem: str) -> bytes | None:
    """The DER bytes of a PEM public key (what its fingerprint hashes), or None when `pem` is not one."""
    lines = pem.strip().splitlines()
    if (len(lines) < 3 or len(pem) > 4096 or lines[0] != "-----BEGIN PUBLIC KEY-----"
            or lines[-1] != "-----END PUBLIC KEY-----" or not all(PEM_LINE.fullmatch(line) for line in lines[1:-1])):
        return None
    try:
        return base64.b64decode("".join(lines[1:-1]), validate=True)
    except ValueError:
        return None


def read_index(fields: Fields, manifest: ReleaseManifest, images: list[ManifestImage]) -> ManifestIndex:
    """An image index: named like an image, its digest, and its platforms' images, each in the manifest's images under
    that platform and name."""
    name = fields.required_text("name", image_name_problem)
    fields.where = f"{fields.where} ({name})"
    digest = fields.required_text("digest", digest_problem)
    derived = {"release_tag": f"{manifest.repository}:{manifest.release_tag(name)}",
               "reference": f"{manifest.repository}@{digest}"}
    for key, expected in derived.items():
        given = fields.text(key, optional=True)
        if given is not None and given != expected:
            fields.refuse(key, f"{visible(given)!r} is not what release, repository and name make: {expected}")
    platforms = fields.table("platforms", platform_problem, lambda value: None if isinstance(value, str) else
                             "must be an image name", optional=False)
    listed = {(item.platform, item.image) for item in images}
    for platform, image in platforms.items():
        if (platform, image) not in listed or without_architecture(str(image), platform) != name:
            fields.refuse("platforms", f"{visible(str(image))!r} for {platform} is not an image of {name} for that "
                                       "platform in this manifest")
    if not platforms:
        fields.refuse("platforms", "lists no platform")
    return ManifestIndex(name=name, digest=digest, platforms=tuple((p, str(i)) for p, i in platforms.items()),
                         signature=fields.text("signature", digest_problem, optional=True))


def read_image(fields: Fields, manifest: ReleaseManifest, folder: Path) -> ManifestImage:
    name = fields.required_text("image", image_name_problem)
    fields.where = f"{fields.where} ({name})"
    platform = fields.text("platform", platform_problem, optional=True) or DEFAULT_PLATFORM
    if why := image_platform_problem(name, platform):
        fields.refuse("platform", why)
    across = without_architecture(name, platform) or name
    variant = fields.required_text("variant")
    if variant not in ("base", *VARIANTS) or not (variant == "base" or across.endswith(f"-{variant}")):
        fields.refuse("variant", f"{visible(variant)!r} is not this image's variant: base, or the name's suffix "
                                 f"({', '.join(VARIANTS)})")
    if len(manifest.pushed_tag(name)) > MAX_TAG:
        fields.refuse("image", f"makes the tag {manifest.pushed_tag(name)[:40]}... longer than {MAX_TAG} characters")
    digest = fields.required_text("digest", digest_problem)
    derived = {"tag": f"{manifest.repository}:{manifest.pushed_tag(name)}",
               "release_tag": f"{manifest.repository}:{manifest.release_tag(name)}",
               "reference": f"{manifest.repository}@{digest}"}
    for key, expected in derived.items():
        given = fields.text(key, optional=True)  # derived: written for readers, checked when read
        if given is not None and given != expected:
            fields.refuse(key, f"{visible(given)!r} is not what release, candidate, repository and image make: "
                               f"{expected}")
    smoke = fields.sub("smoke", SMOKE_FIELDS)
    assert smoke is not None
    return ManifestImage(
        image=name, variant=variant, digest=digest,
        versions=fields.table("versions", version_key_problem, version_value_problem),  # type: ignore[arg-type]
        smoke=SmokeCounts(*(smoke.required_count(key) for key in SMOKE_FIELDS)),
        size_bytes=fields.count("size_bytes", optional=True), layers=fields.count("layers", optional=True),
        content_digest=fields.text("content_digest", digest_problem, optional=True),
        sbom=read_sbom(fields, folder), wheels=read_wheels(fields, folder), platform=platform,
        runs_on=read_runs_on(fields),
        signature=fields.text("signature", digest_problem, optional=True), built_from=read_built_from(fields, variant),
        source_date_epoch=read_epoch(fields), audit=read_audit(fields))


def read_runs_on(fields: Fields) -> dict[str, str] | None:
    """What a host needs; its min_docker, where recorded, a Docker engine release (23.0)."""
    runs_on = fields.table("runs_on", runs_on_key_problem, runs_on_value_problem) or None
    if runs_on and "min_docker" in runs_on and (why := engine_floor_problem(runs_on["min_docker"])):
        fields.refuse("runs_on", f"min_docker {why}")
    return runs_on  # type: ignore[return-value]


def read_audit(fields: Fields) -> dict[str, object] | None:
    audit = fields.value("audit", optional=True)
    if audit is not None and (why := audit_problem(audit)):
        fields.refuse("audit", why)
    return audit  # type: ignore[return-value]


def read_epoch(fields: Fields) -> int | None:
    epoch = fields.value("source_date_epoch", optional=True)
    if epoch is not None and (why := epoch_problem(epoch)):
        fields.refuse("source_date_epoch", why)
    return epoch  # type: ignore[return-value]


def read_built_from(fields: Fields, variant: str) -> BuiltFrom | None:
    built_from = fields.sub("built_from", ("image", "id"), optional=True)
    if built_from is None:
        return None
    if variant != "base":
        fields.refuse("built_from", "is a base image's: a variant is built FROM its base, in the same release")
    return BuiltFrom(image=built_from.required_text("image", image_reference_problem),
                     id=built_from.text("id", digest_problem, optional=True))


def read_sbom(fields: Fields, folder: Path) -> SbomFile | None:
    sbom = fields.sub("sbom", ("path", "sha256", "packages"), optional=True)
    if sbom is None:
        return None
    _, file = beside_manifest(sbom, folder, "an SBOM")
    return SbomFile(file=file, sha256=sbom.required_text("sha256", sha256_problem),
                    packages=sbom.table("packages", package_kind_problem, count_problem))  # type: ignore[arg-type]


def beside_manifest(asset: Fields, folder: Path, what: str) -> tuple[str, Path]:
    """An asset's `path` (relative, by the grammar's rule) and the file it names, which must stay in the manifest's
    folder (a link out of it is refused)."""
    relative = asset.required_text("path", relative_path_problem)
    file = contained(folder, relative)
    if file is None:
        asset.refuse("path", f"{visible(relative)!r} leads out of {folder} (a link); {what} stays beside its manifest")
    return relative, file


def read_wheels(fields: Fields, folder: Path) -> tuple[str, ...] | None:
    """An image's wheel lock, the file beside the manifest its entry names: its bytes must hash to the entry's sha256,
    and every line be a locked wheel."""
    wheels = fields.sub("wheels", ("path", "count", "sha256"), optional=True)
    if wheels is None:
        return None
    relative, file = beside_manifest(wheels, folder, "a lock")
    sha = wheels.required_text("sha256", sha256_problem)
    try:
        content = file.read_bytes() if file.is_file() and file.stat().st_size <= MAX_LOCK else None
    except OSError:
        content = None
    if content is None or hashlib.sha256(content).hexdigest() != sha:
        wheels.refuse("path", f"{relative} is missing, too big or not the file whose sha256 the manifest records")
    lines = tuple(content.decode("utf-8", "replace").splitlines())
    if why := locked_wheels_problem(list(lines)):
        wheels.refuse("path", f"{relative}: {why}")
    if len(lines) != wheels.required_count("count"):
        wheels.refuse("count", f"is not the {len(lines)} wheels {relative} locks")
    return lines


def lock_bytes(lines: tuple[str, ...]) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


def wheels_target(manifest_path: Path, image: str) -> str:
    """Where an image's wheel lock goes, relative to the manifest: MANIFEST.wheels/IMAGE.txt."""
    return f"{manifest_path.stem}.wheels/{image}.txt"


def sbom_target(manifest_path: Path, image: str) -> str:
    """Where an image's SBOM goes, relative to the manifest: MANIFEST.sbom/IMAGE.spdx.json."""
    return f"{sbom_folder_name(manifest_path)}/{image}.spdx.json"


def check_writable(path: Path, option: str = "--manifest") -> None:
    """Refuse a manifest path nothing could be written to, before anything that cannot be undone (a tag PUT): the
    manifest, its Markdown twin, its host index and its SBOM folder."""
    check_output_file(path, option)
    for written in written_paths(path)[1:]:
        if why := output_file_problem(written):
            raise UserError(f"{option} {visible(str(path))}: {visible(str(written))} beside it {why}")
    beside(path, sbom_folder_name(path), option)
    beside(path, f"{path.stem}.wheels", option)


def written_paths(path: Path) -> tuple[Path, Path, Path]:
    """The files `write` writes for a manifest at `path`: itself, its Markdown twin and its host index."""
    return path, path.with_suffix(".md"), hosts_path(path)


def sbom_folder_name(path: Path) -> str:
    return f"{path.stem}.sbom"


def sbom_contents(manifest: ReleaseManifest) -> dict[str, bytes]:
    """Every SBOM's bytes, each checked against its sha256: read before anything is written."""
    return {item.image: item.sbom.read(item.image) for item in manifest.images if item.sbom}


def write(manifest: ReleaseManifest, path: Path, option: str = "--manifest") -> tuple[Path, Path]:
    """JSON and a Markdown table of pinnable references, each written atomically, with each image's SBOM copied
    beside them (MANIFEST.sbom/IMAGE.spdx.json) once its bytes match its sha256."""
    check_writable(path, option)
    contents = sbom_contents(manifest)
    paths = {}
    for image, content in contents.items():
        paths[image] = sbom_target(path, image)
        target = path.parent / paths[image]
        if target.is_symlink():
            target.unlink()  # a link left there is replaced, never written through
        if not (target.is_file() and target.read_bytes() == content):
            atomic_write(target, content)
    locks = {item.image: wheels_target(path, item.image) for item in manifest.images if item.wheels is not None}
    for item in manifest.images:
        if item.wheels is not None:
            target = path.parent / locks[item.image]
            if target.is_symlink():
                target.unlink()
            atomic_write(target, lock_bytes(item.wheels))
    atomic_write(path, json.dumps(manifest.to_json(paths, locks), indent=2) + "\n")
    atomic_write(hosts_path(path), json.dumps(host_index(manifest), indent=2) + "\n")
    markdown = path.with_suffix(".md")
    atomic_write(markdown, markdown_table(manifest))
    return path, markdown


def hosts_path(path: Path) -> Path:
    """The host index beside a manifest: releases/v2.7.json -> releases/v2.7-hosts.json."""
    return path.with_name(f"{path.stem}-hosts.json")


def host_index(manifest: ReleaseManifest) -> dict[str, object]:
    """The small machine-readable index a release publishes: for each tag, each platform's pin, versions and what a
    host needs to run it (the GPU generations, the driver): what `build.py fit` decides with, without the rest."""
    tags: dict[str, dict[str, object]] = {}
    for item in manifest.images:
        tag = tags.setdefault(item.name, {"tag": f"{manifest.repository}:{manifest.pushed_tag(item.name)}",
                                          "platforms": {}})
        tag["platforms"][item.platform] = {  # type: ignore[index]
            "pin": manifest.reference(item), **{key: item.versions.get(key) for key in VERSION_KEYS},
            **(item.runs_on or dict.fromkeys(RUNS_ON_KEYS))}
    return {"release": manifest.release, "candidate": manifest.candidate, "repository": manifest.repository,
            "tags": list(tags.values())}


def audit_cell(audit: dict[str, object] | None) -> str:
    """What the audit found, in words (report.AuditStage.cell); 'not run' where no audit was (a release older than the
    gate). The reader checked its shape (grammar.audit_problem)."""
    return "not run" if audit is None else AuditStage(**audit).cell()  # type: ignore[arg-type]


def markdown_table(manifest: ReleaseManifest) -> str:
    """Every value in it passed the reader's grammar (names, digests, versions): nothing to escape."""
    lines = [f"# Release {manifest.release}", ""]
    if manifest.indexes:
        lines += ["Images for several platforms: one pin for all of them (an image index; docker pulls the host's).", "",
                  "| image | pin | platforms |", "|---|---|---|"]
        lines += [f"| {index.name} | `{manifest.repository}@{index.digest}` | "
                  f"{', '.join(platform for platform, _image in index.platforms)} |" for index in manifest.indexes]
        lines += ["", "Each platform's image:", ""]
    lines += ["| image | platform | pin | torch | cuda | cudnn | python | smoke | audit |",
              "|---|---|---|---|---|---|---|---|---|"]
    for item in manifest.images:
        v, s = item.versions, item.smoke
        lines.append(f"| {item.image} | {item.platform} | `{manifest.reference(item)}` | {v.get('torch')} | "
                     f"{v.get('cuda') or '-'} | {v.get('cudnn') or '-'} | {v.get('python')} | "
                     f"{s.passed} passed, {s.skipped_no_gpu} GPU skipped | {audit_cell(item.audit)} |")
    if manifest.signed_by:
        lines += ["", f"Signed, with the SBOM, provenance and smoke results attested, by the key "
                      f"`{manifest.signed_by.fingerprint}`; verify a tag with `python build.py verify REFERENCE --key "
                      "cosign.pub` (or `cosign verify --key cosign.pub --insecure-ignore-tlog REFERENCE`):", "",
                  "```", manifest.signed_by.public_key.strip(), "```"]
    return "\n".join(lines) + "\n"
