"""The publish stage over a run's report: credentials, pushes, the release manifest."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from .. import manifest
from ..engine import CONTAINERD_STORE, Engine
from ..errors import Problem, UserError
from ..events import EventSink, StageEvent
from ..input import grammar
from ..input.grammar import REGISTRY
from ..input.specs import Release
from ..registry import Credentials, credentials_from_docker_config
from ..report import ImageRecord, Report
from ..workspace import Workspace
from . import promote as promotion
from . import push as publish
from . import signing
from .attachments import Attachments
from .proofs import Attester, ProofError, Signed, sign
from .signing import SigningKey


@dataclass(frozen=True)
class PushOptions:
    repository: str
    registry_user: str | None = None
    password_env: str = "TORCHIMAGES_REGISTRY_PASSWORD"
    password_stdin: bool = False
    registry_ca: Path | None = None
    force: bool = False
    manifest_path: Path | None = None
    release: Release | None = None  # what is pushed: RELEASE[-CANDIDATE]-IMAGE tags; None for promote, which pushes none
    sign_key: Path | None = None  # --sign-key: attest what is pushed, sign what is released
    sign_password_stdin: bool = False
    key: SigningKey | None = None  # the --sign-key loaded (options.signing_key_of), once per command

    def signing_key(self) -> SigningKey | None:
        """--sign-key loaded, with its passphrase from stdin (--sign-password-stdin) or TORCHIMAGES_SIGN_PASSWORD."""
        if self.sign_key is None:
            return None
        passphrase = (sys.stdin.readline().rstrip("\r\n") if self.sign_password_stdin
                      else os.environ.get(signing.PASSWORD_ENV, ""))
        return signing.load_signing_key(self.sign_key, passphrase.encode() or None)

    def credentials(self) -> Credentials | None:
        """From --registry-user with the password from the environment or stdin, else the docker config."""
        self.check()
        if not self.registry_user:
            return credentials_from_docker_config(self.repository.split("/", 1)[0])
        # rstrip("\r\n"): a password piped from a file written on Windows keeps no carriage return.
        password = sys.stdin.readline().rstrip("\r\n") if self.password_stdin else os.environ.get(self.password_env, "")
        if not password:
            raise UserError(f"--registry-user needs a password: set {self.password_env} or use --password-stdin "
                            "(never on the command line)")
        return Credentials(self.registry_user, password)

    def check(self) -> None:
        """Refusals that need no registry: made before anything is built."""
        if "@" in self.repository.split("/", 1)[0]:
            raise UserError("--registry must not carry credentials (they would land in the manifest): give the user "
                            "with --registry-user and the password in TORCHIMAGES_REGISTRY_PASSWORD or on stdin")
        if self.password_stdin and not self.registry_user:
            raise UserError("--password-stdin needs --registry-user: the password on stdin is for that user")
        if self.sign_password_stdin and (self.sign_key is None or self.password_stdin):
            raise UserError("--sign-password-stdin needs --sign-key, and standard input holds one secret: give the "
                            f"registry password in {self.password_env} or the key's passphrase in {signing.PASSWORD_ENV}")
        check_repository(self.repository)
        if self.registry_user is not None and (grammar.control_problem(self.registry_user) or ":" in self.registry_user
                                               or not self.registry_user):
            raise UserError(f"--registry-user {self.registry_user!r} is not a user name: one line of visible text "
                            "without ':'")


# syft saves each image from the engine into the temporary folder, unpacks and catalogs it: three CPU images took 60 s
# one after the other, 41 s three at a time (2 cores), and each scan holds about twice its image's size of temporary
# disk while it runs (3 GB for a 1.4 GB CPU image, 12 GB for a 6.2 GB CUDA 13.0 image).
SBOM_SCANS_AT_A_TIME = 2
TEMP_PER_IMAGE_BYTE = 2.2


def scans_at_a_time(sizes: list[int], temp_free: int) -> int:
    """Scans side by side where the temporary folder holds them all at the largest image's size, else one at a time (two
    CUDA images' scans filled a disk that held one)."""
    largest = max(sizes, default=0)
    return SBOM_SCANS_AT_A_TIME if temp_free >= SBOM_SCANS_AT_A_TIME * TEMP_PER_IMAGE_BYTE * largest else 1


def write_sboms(report: Report, folder: Path, emit: EventSink, engine: Engine) -> None:
    """An SBOM of every pushed image, as tested (by image ID), beside the report; several scanned at a time. On the
    containerd store syft reads each image as the engine saves it (an OCI archive), not from the engine itself."""
    from . import sbom

    save = engine.save_image if engine.store() == CONTAINERD_STORE else None
    pushed = [(record, tested) for record in report.images
              if record.push and record.push.ok and (tested := publish.tested_image_id(record))]

    def scan(record: ImageRecord, tested: str) -> None:
        emit(StageEvent(record.image, "started", "syft", stage="sbom"))
        stage = sbom.generate(tested, folder / f"{record.image}.spdx.json", save=save)
        record.sbom = replace(stage, path=str(Path(stage.path).relative_to(folder.parent)))
        counts = ", ".join(f"{count} {kind}" for kind, count in sorted(stage.packages.items()))
        emit(StageEvent(record.image, "built", f"{counts} packages", stage="sbom"))

    at_once = scans_at_a_time([record.size_bytes or 0 for record, _ in pushed],
                              shutil.disk_usage(tempfile.gettempdir()).free)
    with ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="sbom") as pool:
        for future in [pool.submit(scan, record, tested) for record, tested in pushed]:
            future.result()  # the first failure in the report's order is raised, once every scan has ended


def check_repository(repository: str) -> None:
    if not REGISTRY.fullmatch(repository):
        raise UserError(f"--registry {repository!r} is not a registry/repository reference; use lowercase "
                        "HOST[:PORT]/PATH, e.g. registry.example.com/ml/pytorch")


def push_report(engine: Engine, report: Report, options: PushOptions, emit: EventSink,
                credentials: Credentials | None, *, report_path: Path,
                indexed: dict[str, list[tuple[str, str]]] | None = None) -> tuple[bool, str]:
    """Push what passed its smoke suite with its SBOM, and write the manifest: whether every push succeeded, and what
    was written. Pushed as the release itself (no candidate), each image of `indexed` (Plan.indexed_images) whose
    every platform was pushed gets its release tag as an image index."""
    if options.release is None:
        raise UserError("a push needs the release it is of: --tag")
    release = options.release
    check_audit(report, report_path)
    publisher = publish.Publisher(engine, options.repository, release, credentials=credentials,
                                  ca=options.registry_ca, force=options.force, emit=emit)
    path = Workspace.release_manifest(release.name, options.manifest_path)
    manifest.check_writable(path)  # before the first push, not after the last
    publisher.check_login()
    outcomes = publisher.publish(report)
    report.folder = report.folder or report_path.parent
    write_sboms(report, report.sbom_folder(report_path.parent), emit, engine)
    made = publish.manifest([report], options.repository)
    indexes_ok = proofs_ok = True
    if release.candidate is None and indexed:
        made, indexes_ok = write_indexes(made, indexed, publisher, emit)
    if options.key:
        made, proofs_ok = prove(made, report, options.key, publisher, emit)
    json_path, markdown_path = manifest.write(made, path)
    also = f" and {len(made.indexes)} image indexes" if made.indexes else ""
    return (indexes_ok and proofs_ok and all(outcome.error is None for outcome in outcomes),
            f"release manifest: {json_path} ({markdown_path.name}): {len(made.images)} images{also}")


def check_audit(report: Report, report_path: Path) -> None:
    """The release's gate: no image is pushed while any image's audit failed (verify/auditstage.py)."""
    failed = [record for record in report.images if not record.audit_ok]
    if failed:
        lines = [line for record in failed for line in record.audit.problems][:10]  # type: ignore[union-attr]
        said = [f"{report_path}: the audit failed for {', '.join(r.image for r in failed)}; nothing pushed", *lines,
                "mend each (a newer package, or an allowlist entry with its reason) and audit again"]
        raise UserError([Problem("", None, None, None, line) for line in said])


def prove(made: manifest.ReleaseManifest, report: Report, key: SigningKey, publisher: publish.Publisher,
          emit: EventSink) -> tuple[manifest.ReleaseManifest, bool]:
    """Each pushed image attested (SBOM, provenance, smoke results); a release pushed as itself (no candidate) is also
    signed, tag by tag and index by index, as promote signs a candidates' release. The manifest names the key."""
    attachments = Attachments(publisher.registry, publisher.name)
    ok = Attester(attachments, key).attest_release(made, {r.image: r for r in report.images},
                                                   manifest.sbom_contents(made), emit)
    made = replace(made, signed_by=manifest.SignedBy(key.public.fingerprint, key.public.pem))
    if made.candidate is not None or not ok:
        return made, ok
    try:
        return signed_manifest(made, sign(attachments, key, release_targets(made), made.release)), True
    except ProofError as exc:
        emit(StageEvent(made.release, "failed", str(exc), stage="push"))
        return made, False


def release_targets(made: manifest.ReleaseManifest) -> list[tuple[str, str]]:
    """(REPOSITORY:RELEASE-TAG, digest) of every image and image index of a release: what its signatures name."""
    return ([(f"{made.repository}:{made.release_tag(item.image)}", item.digest) for item in made.images]
            + [(f"{made.repository}:{made.release_tag(index.name)}", index.digest) for index in made.indexes])


def signed_manifest(made: manifest.ReleaseManifest, signed: list[Signed]) -> manifest.ReleaseManifest:
    """The manifest with each image's and index's signature (the digest of its .sig manifest)."""
    by_digest = {item.digest: item.signature for item in signed}
    return replace(made, images=tuple(replace(i, signature=by_digest.get(i.digest)) for i in made.images),
                   indexes=tuple(replace(i, signature=by_digest.get(i.digest)) for i in made.indexes))


def write_indexes(made: manifest.ReleaseManifest, indexed: dict[str, list[tuple[str, str]]],
                  publisher: publish.Publisher, emit: EventSink) -> tuple[manifest.ReleaseManifest, bool]:
    """The image index of each image whose every platform this report pushed (promote's rules: each member read back
    by digest, an index tag at another image refused unless --force); an image with some platforms only is told to go
    through candidates and promote. The manifest with the indexes written, and whether every one was."""
    pushed = made.by_name()
    complete = {name: members for name, members in indexed.items() if all(image in pushed for _, image in members)}
    for name, members in indexed.items():
        if name not in complete and any(image in pushed for _, image in members):
            emit(StageEvent(name, "note", "no image index: this run pushed only some of its platforms; push each "
                                          "platform as a candidate (--candidate) and promote them", stage="push"))
    repository, members = made.repository, [image for listed in complete.values() for _, image in listed]
    promotions = [promotion.Promotion(image, pushed[image].digest, f"{repository}:{made.pushed_tag(image)}",
                                      f"{repository}:{made.release_tag(image)}", made.release_tag(image),
                                      pushed[image].platform) for image in members]
    promoter = promotion.Promoter(publisher.registry, publisher.repository, emit, force=publisher.force)
    try:
        indexes = promotion.index_plan(promotions, complete, repository, made.release)
        promoter.inspect(promotions)
        promoter.prepare(indexes, promotions)
        promoter.check([], indexes)
    except promotion.PromotionRefused as refused:
        for name in complete:
            emit(StageEvent(name, "failed", str(refused), stage="push"))
        return made, False
    promoter.promote_indexes(indexes)
    written = [index for index in indexes if index.state in ("promoted", "unchanged")]
    return promotion.release_manifest(made, [], written, keep_images=True), len(written) == len(indexes)
