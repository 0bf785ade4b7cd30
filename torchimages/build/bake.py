"""`build.py bake`: the plan's images as a `docker buildx bake` file, for pipelines that build with bake.

Each image becomes a target given exactly what `build.py build --builder buildkit` gives its build (build/jobs.py
BuildRunner.prepare): the same staged context (the rendered files, the CA bundle, the wheels for its platform), the
same Dockerfile, build arguments, labels (the content digest included) and platform, and the network settings pip reads
in the same secret file (buildkit.as_secret, BUILD_ENV its digest). So bake's build runs the same steps with the same
inputs, and on a builder that holds `build.py`'s cache it makes the same layers. A variant's FROM is its base's tag, as
`build` gives it: the group `bases` is built first (`docker buildx bake -f FILE bases && docker buildx bake -f FILE`).
Naming the base's target as the variant's FROM (bake's `target:` contexts) would build in one command, but 20.10's
BuildKit refuses named contexts, and on dockerd 26 the variants' steps then miss the cache `build` filled (their FROM
is the target's build, not the image in the store) and make other layers: both tried here.

The proxy settings, and any argument whose value carries credentials, are not written into the file: each is a bake
variable of the same name, read from the environment bake runs in, as `build.py` reads them. An argument the Dockerfile
does not declare is left out: it changes nothing in the build. The secret files (index URLs and their tokens) are
written with mode 0600 beside the bake file, under `secrets/`; the contexts under `contexts/`.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..files import atomic_write
from .buildkit import as_secret
from .cache import without_credentials
from .inputs import PROXY_VARIABLES
from .jobs import BuildJob, BuildRunner
from .render import BUILDKIT_DOCKERFILE

BAKE_FILE = "docker-bake.json"
# As `build` builds (buildkit.BuildKitCli.command): buildx's own attestations would make the image an index on the
# containerd store; push attests what was proven instead
NO_ATTESTATIONS = ["type=provenance,disabled=true", "type=sbom,disabled=true"]
ARG_LINE = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)


def target_name(image: str) -> str:
    """bake's names are letters, digits, '_' and '-': torch2.13.0-cpu-py3.11 -> torch2_13_0-cpu-py3_11."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", image)


def group_name(entry: str) -> str:
    """An entry's group: its base's target name would be the base alone, so `-all` (torch2_13_0-cpu-py3_11-all)."""
    return f"{target_name(entry)}-all"


def export(jobs: list[BuildJob], runner: BuildRunner, out: Path) -> tuple[Path, dict[str, Any]]:
    """Stage each job's context under OUT/contexts and write OUT/docker-bake.json: a target per image, a group per
    entry (its base and variants: NAME-all), `bases` and `default` (every image). Bases come before their variants in
    `jobs`, and a variant's FROM is its base's tag, found in the engine: `bases` is built first."""
    targets: dict[str, dict[str, object]] = {}
    groups: dict[str, list[str]] = {}
    variables: set[str] = set()
    secrets = out / "secrets"
    secrets.mkdir(mode=0o700, parents=True, exist_ok=True)
    for job in jobs:
        context = out / "contexts" / job.image
        shutil.rmtree(context, ignore_errors=True)
        context.parent.mkdir(parents=True, exist_ok=True)
        prepared = runner.prepare(job, context)
        if isinstance(prepared, str):
            raise UserError(f"{job.image}: {prepared}")
        args, secret = dict(prepared.buildargs), []
        dockerfile = BUILDKIT_DOCKERFILE if (context / BUILDKIT_DOCKERFILE).is_file() else "Dockerfile"
        if dockerfile == BUILDKIT_DOCKERFILE:  # its installing steps read pip's settings from the secret
            args, _options = as_secret(args, secrets / f"{job.image}.env")
            secret = [f"id=build-env,src={(secrets / f'{job.image}.env').resolve()}"]
        # An argument the Dockerfile does not declare changes nothing in the build; a proxy, or any value that
        # carries credentials, is read where bake runs, never written here
        declared = set(ARG_LINE.findall((context / dockerfile).read_text(encoding="utf-8")))
        args = {name: value for name, value in args.items() if name in declared or name in PROXY_VARIABLES}
        for name in [name for name, value in args.items() if name in PROXY_VARIABLES or without_credentials(value) != value]:
            args[name] = f"${{{name}}}"
            variables.add(name)
        target: dict[str, object] = {"context": str(context.resolve()), "dockerfile": dockerfile, "tags": [job.tag],
                                     "args": args, "labels": prepared.labels, "platforms": [job.platform],
                                     "attest": NO_ATTESTATIONS}
        if secret:
            target["secret"] = secret
        targets[target_name(job.image)] = target
        groups.setdefault(group_name(job.spec.name), []).append(target_name(job.image))
    bake: dict[str, Any] = {"variable": {name: {"default": ""} for name in sorted(variables)}} if variables else {}
    bases = [target_name(job.image) for job in jobs if not job.depends_on]
    bake["group"] = {"default": {"targets": list(targets)}, "bases": {"targets": bases},
                     **{name: {"targets": members} for name, members in groups.items()}}
    bake["target"] = targets
    path = out / BAKE_FILE
    atomic_write(path, json.dumps(bake, indent=2) + "\n")
    return path, bake
