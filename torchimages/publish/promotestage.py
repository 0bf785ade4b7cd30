"""The promote stage over a release: check the candidates' manifest against the matrix and the registry, point
every release tag at its candidate's digest (torchimages.publish.promote), write the release manifest. Every check is made
before the first tag is written; an incomplete promotion is finished by running it again."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from .. import manifest
from ..consoles import err, out
from ..errors import UserError, visible
from ..events import EventSink
from ..input.specs import Plan
from ..registry import registry_client, split_reference
from ..workspace import Workspace
from . import promote as promotion
from .pushstage import PushOptions


def checked_candidates(candidates_path: Path, release: str, options: PushOptions) -> tuple[manifest.ReleaseManifest, Path]:
    """The candidates' manifest, of this release and repository, and where the release manifest goes (writable),
    with every SBOM it names read and checked: all before anything is written."""
    candidates = manifest.read(candidates_path)
    if candidates.release != release or candidates.repository != options.repository:
        raise UserError(f"{candidates_path} is release {candidates.release} in {candidates.repository}, "
                        f"not {release} in {options.repository}")
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
    expected = [name for spec in plan.specs for name in spec.image_names()]
    try:
        promotions = promotion.plan(candidates, expected)
        promoter = promotion.Promoter(registry, options.repository, emit, force=options.force)
        promoter.check(promotions)
        promoter.promote(promotions)
    except promotion.PromotionRefused as refused:
        err.print(f"[bold red]not promoted[/]: {escape(visible(str(refused)))}", markup=True)
        return 1
    failed = [p for p in promotions if p.state == "failed"]
    if failed:
        err.print(f"[bold red]promotion incomplete[/]: {len(failed)} of {len(promotions)} release tags not written "
                  f"({escape(visible(failed[0].error or ''))}); run the same command again to finish", markup=True)
        return 1
    json_path, markdown_path = manifest.write(promotion.release_manifest(candidates, promotions), release_path)
    out.print(f"promoted {len(promotions)} images of {release} from {candidates.candidate}; release manifest: "
              f"{json_path} ({markdown_path.name})")
    return 0
