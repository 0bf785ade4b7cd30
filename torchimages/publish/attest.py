"""What was proven of a pushed image, as in-toto statements about its digest: its SBOM, its provenance and its smoke
suite's result. Each is signed (a DSSE envelope, publish.signing) and attached beside the image (publish.attachments),
so the proof travels with the image to whoever pulls it by digest.

- SBOM: the SPDX document syft made of the image (predicate type https://spdx.dev/Document).
- Provenance: SLSA provenance v1 (https://slsa.dev/provenance/v1): the matrix entry and the release as the external
  parameters; as resolved dependencies the rendered Dockerfile, the FROM image by ID, every wheel given to the build
  and the indexes it could download from; the builder, the engine and this tool's version.
- Test result: https://in-toto.io/attestation/test-result/v0.1, its passed, warned (skipped) and failed checks by
  name, plus the skipped checks' reasons and which of them were skipped for lack of a GPU.
"""

from __future__ import annotations

import json

from .. import __version__
from ..manifest import ManifestImage
from ..report import ImageRecord
from ..verify.suite import NO_GPU

SBOM_TYPE = "https://spdx.dev/Document"
PROVENANCE_TYPE = "https://slsa.dev/provenance/v1"
TEST_RESULT_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
PREDICATE_TYPES = (SBOM_TYPE, PROVENANCE_TYPE, TEST_RESULT_TYPE)
BUILD_TYPE = "https://torchimages.dev/build/v1"  # names this project's build: matrix entry -> rendered context -> image


def sbom_predicate(document: bytes) -> dict[str, object]:
    data = json.loads(document)
    if not isinstance(data, dict):
        raise ValueError("the SBOM is not an SPDX JSON document")
    return data


def provenance_predicate(record: ImageRecord, item: ManifestImage, release: str) -> dict[str, object]:
    materials = record.materials or {}
    dependencies: list[dict[str, object]] = []
    if materials.get("dockerfile_sha256"):
        dependencies.append({"uri": f"images/{record.image}/{materials['dockerfile']}",
                             "digest": {"sha256": materials["dockerfile_sha256"]}})
    if materials.get("from"):
        found = {"uri": f"docker-image://{materials['from']}"}
        if materials.get("from_id"):
            found["digest"] = {"sha256": str(materials["from_id"]).removeprefix("sha256:")}
        dependencies.append(found)
    dependencies += [{"uri": f"wheel:{name}", "name": name, "digest": {"sha256": sha}}
                     for name, sha in dict(materials.get("wheels") or {}).items()]
    dependencies += [{"uri": url, "annotations": {"role": "package index"}} for url in materials.get("indexes") or []]
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {"release": release, "entry": record.entry, "image": record.image,
                                   "variant": record.variant, "platform": record.platform, "versions": item.versions},
            "internalParameters": {"content_digest": record.content_digest, "reused": record.reused,
                                   "source_date_epoch": materials.get("source_date_epoch")},
            "resolvedDependencies": dependencies,
        },
        "runDetails": {
            "builder": {"id": "https://torchimages.dev/builder", "version": {
                "torchimages": __version__, "builder": record.builder or "not built in this run",
                "engine": str(materials.get("engine") or "unknown")}},
            "metadata": {"invocationId": f"{release}/{record.image}"},
        },
    }


def test_result_predicate(record: ImageRecord) -> dict[str, object]:
    checks = record.smoke.checks if record.smoke else []
    by = {outcome: [str(c.get("name")) for c in checks if c.get("outcome") == outcome]
          for outcome in ("passed", "failed", "skipped")}
    no_gpu = [str(c.get("name")) for c in checks if c.get("outcome") == "skipped" and NO_GPU in str(c.get("message"))]
    smoke = record.smoke
    return {
        "result": "FAILED" if by["failed"] or not smoke or not smoke.ok else "WARNED" if by["skipped"] else "PASSED",
        "configuration": [{"name": "tests/smoke", "annotations": {"engine": str((record.materials or {}).get("engine")),
                                                                   "gpus": str(smoke.gpus if smoke else 0)}}],
        "passedTests": by["passed"], "warnedTests": by["skipped"], "failedTests": by["failed"],
        "skippedForLackOfGpu": no_gpu,
        "skipReasons": {str(c.get("name")): str(c.get("message"))[:300] for c in checks if c.get("outcome") == "skipped"},
    }
