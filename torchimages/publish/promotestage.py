"""The promote stage over a release: check the candidates' manifest against the matrix and the registry, point
every release tag at its candidate's digest (torchimages.publish.promote), write the release manifest. Every check is made
before the first tag is written; an incomplete promotion is finished by running it again."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rich.markup import escape

from .. import manifest
from ..consoles import err, out
from ..errors import UserError, visible
from ..events import EventSink
from ..input.specs import Plan
from ..registry import RegistryClient, registry_client, split_reference
from ..workspace import Workspace
from . import promote as promotion
from . import proofs
from .attachments import Attachments
from .pushstage import PushOptions, signed_manifest


def checked_candidates(candidates_path: Path, release: str, options: PushOptions) -> tuple[manifest.ReleaseManifest, Path]:
    """The candidates' manifest, of this release and repository, and where the release manifest goes (writable),
    with every SBOM it names read and checked: all before anything is written."""
    candidates = manifest.read(candidates_path)
    if candidates.release != release or candidates.repository != options.repository:
        raise UserError(f"{candidates_path} is release {candidates.release} in {candidates.repository}, "
                        f"not {release} in {options.repository}")
    failed = [item.image for item in candidates.images if item.audit and item.audit["status"] == "failed"]
    if failed:  # push refuses to push such images; a manifest merged from other runs' reports may hold them
        raise UserError(f"{candidates_path}: the audit failed for {', '.join(failed)}: nothing promoted")
    release_path = Workspace.release_manifest(release, options.manifest_path)
    manifest.check_writable(release_path)
    manifest.sbom_contents(candidates)
    return candidates, release_path


def run(plan: Plan, candidates: manifest.ReleaseManifest, release_path: Path, options: PushOptions,
        emit: EventSink) -> int:
    """Promote every image of the matrix's release (checked_candidates), or none; the exit code (1: refused or
    incomplete)."""
    release = candidates.release
    registry = registry_client(split_reference(options.repository)[0], options.credentials(), options.registry_ca)
    expected = {built.image: built.platform for spec in plan.specs for built in spec.platform_images()}
    try:
        promotions = promotion.plan(candidates, expected)
        indexes = promotion.index_plan(promotions, plan.indexed_images(), candidates.repository, candidates.release)
        promoter = promotion.Promoter(registry, options.repository, emit, force=options.force)
        promoter.inspect(promotions)
        promoter.prepare(indexes, promotions)
        promoter.check(promotions, indexes)
        signed = signed_before_promotion(candidates, promotions, indexes, options, registry)
        promoter.promote(promotions)
        if not any(p.state == "failed" for p in promotions):  # an index only over images that are all in place
            promoter.promote_indexes(indexes)
    except (promotion.PromotionRefused, proofs.ProofError) as refused:
        err.print(f"[bold red]not promoted[/]: {escape(visible(str(refused)))}", markup=True)
        return 1
    failed = [p for p in [*promotions, *indexes] if p.state not in ("unchanged", "promoted")]
    if failed:
        first = next((p.error for p in failed if p.error), "")
        err.print(f"[bold red]promotion incomplete[/]: {len(failed)} of {len(promotions) + len(indexes)} release tags "
                  f"not written ({escape(visible(first or ''))}); run the same command again to finish", markup=True)
        return 1
    released = promotion.release_manifest(candidates, promotions, indexes)
    if options.key:
        released = replace(signed_manifest(released, signed),
                           signed_by=manifest.SignedBy(options.key.public.fingerprint, options.key.public.pem))
    json_path, markdown_path = manifest.write(released, release_path)
    also = f" and {len(indexes)} image indexes" if indexes else ""
    out.print(f"promoted {len(promotions)} images{also} of {release} from {candidates.candidate}; release manifest: "
              f"{json_path} ({markdown_path.name})")
    return 0


def signed_before_promotion(candidates: manifest.ReleaseManifest, promotions: list[promotion.Promotion],
                            indexes: list[promotion.IndexPromotion], options: PushOptions,
                            registry: RegistryClient) -> list[proofs.Signed]:
    """With --sign-key: each candidate's attestations verified with the key (made when it was pushed), then every image
    and index signed for its release tag; all before the first tag, so a failure promotes nothing."""
    key = options.key
    if key is None:
        return []
    if candidates.signed_by and candidates.signed_by.fingerprint != key.public.fingerprint:
        raise proofs.ProofError(f"the candidates were attested with the key {candidates.signed_by.fingerprint}, not "
                                f"--sign-key's {key.public.fingerprint}; no release tag was written")
    attachments = Attachments(registry, split_reference(options.repository)[1])
    proofs.check_attested(attachments, key.public, [(p.image, p.digest) for p in promotions])
    targets = [(p.release_tag, p.digest) for p in promotions] + [(i.release_tag, i.digest) for i in indexes]
    return proofs.sign(attachments, key, targets, candidates.release)
