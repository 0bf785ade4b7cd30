#!/usr/bin/env python3
"""What the unit tests catch: apply one small, plausible bug at a time to a copy of the working tree (the
validation, compat lookups, publishing rules, build inputs and templates), run tests/unit there, and print
which bugs no test noticed. Prints numbers; asserts nothing.

    .venv/bin/python benchmarks/mutations.py [--jobs N] [--only TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutation:
    path: str
    before: str
    after: str
    what: str


MUTATIONS = [
    # validation (specs.py)
    Mutation("torchimages/input/grammar.py", 'NAME = pattern(r"[a-z0-9][a-z0-9._-]{0,79}")',
             'NAME = pattern(r"[A-Za-z0-9][A-Za-z0-9._/ -]{0,99}")', "image-name pattern loosened"),
    Mutation("torchimages/input/specs.py", 'if self.entry.get("pip") and any(grammar.requirement_name(p) in ("torch", *DOMAIN_LIBS)',
             'if False and any(grammar.requirement_name(p) in ("torch", *DOMAIN_LIBS)', "torch in an NGC entry's pip accepted"),
    Mutation("torchimages/input/specs.py", 'elif requirement.strip() not in (name, f"{name}=={paired}"):', "elif False:",
             "a wrongly pinned torchvision accepted"),
    Mutation("torchimages/input/specs.py", '            if name == "torch":\n', "            if False:\n",
             "torch in a cuda/cpu entry's pip accepted"),
    Mutation("torchimages/input/specs.py",
             'self.forbid("a cuda image gets its versions from torch wheels, not an NGC release", "ngc")', "pass",
             "a cuda entry with an ngc field accepted"),
    Mutation("torchimages/input/specs.py", "elif not matches(wanted, build.cudnn):", "elif False:", "another cuDNN accepted"),
    Mutation("torchimages/input/specs.py", "        if python in release.python:\n", "        if True:\n",
             "a Python without wheels accepted"),
    Mutation("torchimages/input/specs.py", '"min_driver_compat": self.data.family_min_driver(build.cuda)',
             '"min_driver_compat": self.data.min_driver(build.cuda)', "min-driver-minor-compat from the wrong table"),
    # compat data lookups (compat.py)
    Mutation("torchimages/input/compat.py", "exact = max(found, key=version_key, default=None)",
             "exact = min(found, key=version_key, default=None)", "min driver of the oldest patch, not the newest"),
    Mutation("torchimages/input/compat.py", 'return self.family_driver.get(cuda.split(".", maxsplit=1)[0])',
             'return self.family_driver.get("12")', "minor-version-compat family fixed to CUDA 12"),
    # labels (render.py)
    Mutation("torchimages/build/render.py", 'f"{prefix}.min-driver-minor-compat": spec.min_driver_compat or "none"',
             'f"{prefix}.min-driver-minor-compat": spec.min_driver or "none"', "wrong min-driver-minor-compat label"),
    # publishing (publish.py)
    Mutation("torchimages/publish/push.py", "force: bool = False, retries: int = 3, backoff: float = 1.0,",
             "force: bool = False, retries: int = 0, backoff: float = 1.0,", "default retries 0"),
    Mutation("torchimages/publish/push.py", "                delay *= 2\n", "                delay *= 1\n", "no exponential backoff"),
    Mutation("torchimages/publish/push.py", "return not any(marker in lowered for marker in DENIED) and ",
             "return ", "denied errors retried as transient"),
    Mutation("torchimages/registry.py", "entry = docker.auth.load_config(config_dict=raw).resolve_authconfig(host)",
             "entry = (raw.get(\"auths\") or {}).get(host)", "credsStore and credHelpers ignored"),
    Mutation("torchimages/publish/pushstage.py", 'sys.stdin.readline().rstrip("\\r\\n") if self.password_stdin else ',
             "", "--password-stdin ignored"),
    Mutation("torchimages/publish/pushstage.py", 'sys.stdin.readline().rstrip("\\r\\n") if self.password_stdin',
             'sys.stdin.readline().rstrip("\\n") if self.password_stdin', "a CR from stdin kept in the password"),
    Mutation("torchimages/input/grammar.py", 'NAME = pattern(r"[a-z0-9][a-z0-9._-]{0,79}")',
             'NAME = pattern(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")', "uppercase image names accepted"),
    Mutation("torchimages/build/render.py", "    check_output_folder(out)\n", "", "render replaces any folder"),
    Mutation("torchimages/input/matrix.py", "if listed + size + len(block.get(\"include\") or []) > max_images:", "if False:",
             "no limit on matrix expansion"),
    Mutation("torchimages/input/grammar.py", '    if value.lstrip().startswith("-"):\n        return f"\'{value}\' is a pip option',
             '    if False:\n        return f"\'{value}\' is a pip option', "pip options accepted as requirements"),
    Mutation("torchimages/input/grammar.py", 'if urlsplit(requirement.url).scheme != "https":', "if False:",
             "http direct references accepted"),
    Mutation("torchimages/input/grammar.py", 'REFUSED_CATEGORIES = {"Cc", "Cf",', 'REFUSED_CATEGORIES = {"Cf",',
             "control characters accepted"),
    Mutation("templates/partials/base-wheels.j2", "{% for requirement in spec.pip %} {{ requirement | shell_quote }}",
             '{% for requirement in spec.pip %} "{{ requirement }}"', "pip requirements not shell-quoted"),
    Mutation("torchimages/workspace.py", "        return Path(\"images\") / self.matrix.stem\n",
             "        return Path(\"images\")\n", "another matrix renders over images/"),
    Mutation("torchimages/build/render.py", "    if out.is_dir() and not differences(files, out):\n        return dockerfiles\n", "",
             "an unchanged render writes everything again"),
    Mutation("torchimages/input/compat.py", "        if cached.get(\"compat_yaml_sha256\") == digest(text):",
             "        if True:", "a stale compiled compat.json used"),
    Mutation("torchimages/errors.py", "    if all(unicodedata.category(c) not in HIDDEN for c in text):\n        return text\n",
             "    return text\n", "messages print control characters raw"),
    Mutation("torchimages/build/render.py",
             "        keep_nested_renders(out, staging, {name.split(\"/\", 1)[0] for name in files if \"/\" in name})\n", "",
             "rendering images/ deletes images/<matrix>/"),
    # build inputs (buildinputs.py)
    Mutation("torchimages/build/inputs.py", "if self.apt_mirror and \"@\" in urlsplit(self.apt_mirror).netloc:",
             "if False:", "--apt-mirror with credentials accepted"),
    Mutation("torchimages/build/inputs.py", r'^(torch|triton|nvidia_[a-z0-9_]+|cuda_[a-z0-9_]+)-',
             r'^(torch|nvidia_[a-z0-9_]+)-', "triton and cuda_* wheels sent to variants"),
    Mutation("torchimages/build/inputs.py", "if installs_torch or not TORCH_STACK_WHEEL.match(wheel.name):", "if True:",
             "torch wheels sent to every build"),
    Mutation("torchimages/build/inputs.py", '            args["OFFLINE"] = "1"\n', "            pass\n",
             "--offline not passed to the build"),
    # build failure messages (engine.py, buildstage.py)
    Mutation("torchimages/engine.py", 'did not complete successfully: exit code: (\\d+)$', "did not finish: exit code: (\\d+)$",
             "BuildKit 0.10+'s failed command not recognised"),
    Mutation("torchimages/build/stage.py", 'return step if len(step) <= limit else', "return step if True else",
             "a long failed step shown whole"),
    # templates and the files they copy
    Mutation("templates/partials/base-wheels.j2", "grep -iE '^(torch|torchvision|", "grep -iE '^(torchvision|",
             "constraint file without torch"),
    Mutation("templates/partials/base-wheels.j2", "sys.exit(0 if got == want else", "sys.exit(0 if True else",
             "torch built for another CUDA accepted"),
    Mutation("templates/files/jupyter_server_config.py", 'os.environ["JUPYTER_TOKEN"] = secrets.token_hex(24)',
             'os.environ["JUPYTER_TOKEN"] = ""', "Jupyter without a token"),
    Mutation("templates/files/jupyter_server_config.py", "c.ServerApp.allow_root = False", "c.ServerApp.allow_root = True",
             "Jupyter allowed to run as root"),
    Mutation("templates/files/sshd_config", "PasswordAuthentication no", "PasswordAuthentication yes",
             "sshd password login on"),
    Mutation("templates/files/sshd_config", "PermitRootLogin no", "PermitRootLogin yes", "sshd root login on"),
    Mutation("templates/files/image-doctor", 'needs_gpu = image.get("flavor") in ("cuda", "ngc")', "needs_gpu = True",
             "image-doctor wants a GPU for cpu images"),
    # the release path (issue 27): what it reads after the matrix, and the code that decides
    # the release gate: what promote and every reader check before anything is published or written
    Mutation("torchimages/publish/promote.py",
             "    if twice := next((d for d, found in platforms_of.items() if len(found) > 1), None):", "    if twice := None:",
             "release gate: one digest promoted for two platforms"),
    Mutation("torchimages/publish/promote.py", "            if why := config_platform_problem(config, promotion.platform):",
             "            if why := None:", "release gate: a candidate's config platform not compared"),
    Mutation("torchimages/publish/promote.py", '    if media_type not in IMAGE_MANIFEST_TYPES or "manifests" in data:',
             "    if False:", "release gate: an index accepted as an index member"),
    Mutation("torchimages/publish/promote.py", "            promotion.body, promotion.media_type = body, media_type",
             "            promotion.body, promotion.media_type = body, _header", "release gate: the media type from the header"),
    Mutation("torchimages/publish/promote.py", "        if recorded != platform or image_platform_problem(name, recorded):",
             "        if False:", "release gate: a candidate's platform not held to the matrix"),
    Mutation("torchimages/manifest.py", "        if why := output_file_problem(written):", "        if why := None:",
             "release gate: the host index and Markdown paths checked after the tags"),
    Mutation("torchimages/input/grammar.py", "    if platform == said:\n        return None", "    if True:\n        return None",
             "release gate: a platform that disagrees with the image's name accepted"),
    Mutation("torchimages/build/render.py", "    if why := text_problem(release, release_problem):",
             "    if why := None:", "release gate: rendered.json's release used unchecked"),
    Mutation("torchimages/files.py", "    if system := in_system_folder(path):\n        return f\"is under {system}; give the path",
             "    if system := None:\n        return f\"is under {system}; give the path",
             "release gate: an output under /dev written"),
    Mutation("torchimages/build/render.py", "    links = {str(p.relative_to(folder)) for p in inside if p.is_symlink()}",
             "    links: set[str] = set()", "release gate: a link in images/ passes render --check"),
    Mutation("torchimages/input/lock.py", "            if source != locate(tag).url:", "            if False:",
             "release gate: a lock pin's source taken as it comes"),
    Mutation("torchimages/input/grammar.py", 'RUNS_ON_WORD = pattern(r"[0-9]{1,4}(\\.[0-9]{1,4}){0,2}(\\+PTX)?")',
             'RUNS_ON_WORD = re.compile(r"\\d{1,4}(\\.\\d{1,4}){0,2}(\\+PTX)?")', "release gate: other scripts' digits in runs_on"),
    Mutation("torchimages/input/grammar.py", 'VERSION = pattern(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")',
             'VERSION = re.compile(r"\\w[\\w.+-]{0,63}")', "release gate: other scripts' digits in versions"),
    Mutation("torchimages/input/grammar.py", 'DIGEST = pattern(r"sha256:[0-9a-f]{64}")',
             'DIGEST = pattern(r"sha256:[0-9a-f]+")', "release path: short digests accepted"),
    Mutation("torchimages/input/grammar.py", "    if DIGEST.fullmatch(value):\n", "    if DIGEST.match(value):\n",
             "release path: a digest with text after it accepted"),
    Mutation("torchimages/files.py", "        path.resolve().relative_to(folder.resolve())\n",
             "        path.relative_to(folder)\n", "release path: an SBOM link out of its folder followed"),
    Mutation("torchimages/input/grammar.py", 'or any(part in ("..", ".") for part in value.split("/"))', "",
             "release path: '..' in an SBOM path accepted"),
    Mutation("torchimages/checkedjson.py", "            if unknown:\n", "            if False:\n",
             "release path: unknown fields accepted"),
    Mutation("torchimages/checkedjson.py", "        if isinstance(value, bool) or not isinstance(value, int) or value < 0:",
             "        if not isinstance(value, int):", "release path: negative and true sizes accepted"),
    Mutation("torchimages/manifest.py", "        if given is not None and given != expected:",
             "        if False:", "release path: a manifest's tags taken as they come"),
    Mutation("torchimages/manifest.py", '    if len(set(names)) != len(names):\n        top.refuse',
             '    if False:\n        top.refuse', "release path: an image listed twice accepted"),
    Mutation("torchimages/input/grammar.py",
             "    if control_problem(value) is None and (NAME.fullmatch(across) or (variant in VARIANTS and NAME.fullmatch(base))):",
             "    if value:", "release path: any image name accepted"),
    Mutation("torchimages/manifest.py", "        if hashlib.sha256(content).hexdigest() != self.sha256:",
             "        if False:", "release path: an SBOM's sha256 not checked"),
    Mutation("torchimages/files.py", "    if path.is_dir():\n        return \"is a folder; give the path",
             "    if False:\n        return \"is a folder; give the path", "release path: a folder as --manifest accepted"),
    Mutation("torchimages/manifest.py",
             "    if manifest.candidate and len(manifest.pushed.name) > MAX_TAG:",
             "    if False:", "release path: a candidate tag over 128 characters accepted"),
    Mutation("torchimages/publish/promotestage.py", "    manifest.check_writable(release_path)\n",
             "", "release path: promote checks its manifest path after the tags"),
    Mutation("torchimages/publish/promotestage.py", "    manifest.sbom_contents(candidates)\n", "",
             "release path: promote reads the SBOMs after the tags"),
    Mutation("torchimages/release.py", "    if run_report.release != release:", "    if False:",
             "release path: push takes another release's report"),
    Mutation("torchimages/publish/promote.py",
             '"{repository}:{candidates.release_tag(name)}", candidates.release_tag(name), platform)',
             '"{repository}:{candidates.release_tag(name)}", "latest", platform)', "release path: promote PUTs latest"),
    Mutation("torchimages/publish/promote.py",
             '                if f"sha256:{hashlib.sha256(body).hexdigest()}" != promotion.digest:', "                if False:",
             "release path: manifest bytes not hashed before the PUT"),
    Mutation("torchimages/publish/promote.py",
             "            except requests.RequestException as exc:\n                raise PromotionRefused(f\"{exc}; no release tag "
             "was written\") from None\n            if current",
             "            except KeyError as exc:\n                raise PromotionRefused(f\"{exc}; no release tag "
             "was written\") from None\n            if current",
             "release path: an unreachable registry is a traceback in promote"),
    Mutation("torchimages/registry.py", "trusted = parts.hostname == urlsplit(self.base).hostname or parts.hostname in",
             "trusted = True or parts.hostname in", "release path: credentials sent to any token realm"),
    Mutation("torchimages/registry.py", '        if parts.scheme != "https" or not parts.hostname',
             '        if not parts.hostname', "release path: a token realm over plain http"),
    Mutation("torchimages/input/lock.py", "        if why := digest_problem(digest):", "        if why := None:",
             "release path: lock writes whatever digest the registry answers"),
    Mutation("torchimages/input/lock.py", '            digest = pin.required_text("digest", digest_problem)',
             '            digest = pin.required_text("digest")', "release path: a lock pin unchecked"),
    Mutation("torchimages/build/budget.py", "    if not 0 <= value <= (10 if percent else 1):", "    if not 0 <= value <= 10:",
             "release path: --max-growth 5 read as 500 %"),
    Mutation("torchimages/build/cache.py", "        if previous_manifest.repository != repository:", "        if False:",
             "release path: --cache-from previous pulls from any registry"),
    Mutation("torchimages/build/jobs.py", " and self._labelled(job.image, previous, digest)\n", "\n",
             "release path: a reused image's content label not checked"),
    Mutation("torchimages/errors.py", 'for c in "\\\\`*_[]|#"} | {"<": "&lt;", ">": "&gt;", "&": "&amp;"}',
             'for c in ""} | {}', "release path: release notes not escaped"),
    Mutation("torchimages/report.py", '        ("image", image_name_problem(record.image)),\n', "",
             "release path: a report's image name unchecked"),
    Mutation("torchimages/report.py", '        checks += [("stages.sbom.path", text_problem(sbom.path, relative_path_problem)),',
             '        checks += [("stages.sbom.path", None),', "release path: a report's SBOM path unchecked"),
    Mutation("torchimages/publish/push.py", "    if record.push.reference != expected:", "    if False:",
             "release path: a report pushed elsewhere merged"),
    Mutation("torchimages/input/planning.py", "    if len(longest) > MAX_TAG:", "    if False:",
             "release path: a 128-character --tag makes a longer image tag"),
    Mutation("torchimages/input/compat.py", 'fields.required_text("image", lambda v: grammar.',
             'fields.required_text("image", lambda v: None and grammar.', "release path: an extra compat row's image unchecked"),
    Mutation("scripts/release-assets.sh", '    check_members "${dir}/${tag}-manifest.tar.gz" "${tag}"\n', "",
             "release path: a downloaded release asset extracted unchecked"),
    Mutation("scripts/release-assets.sh", 'if [[ "${said}" == *"${NOT_FOUND}"* ]]; then', "if true; then",
             "release path: a failed GitHub answer read as no previous release"),
    Mutation("scripts/open-refresh-pr.sh", 'push -q "https://github.com/${repository}.git"',
             'push -q "https://x-access-token:${GH_TOKEN}@github.com/${repository}.git"',
             "release path: the refresh token on git's command line"),
    Mutation("scripts/open-refresh-pr.sh", '[ -f "${summary}" ] && [ -s "${summary}" ] || fail', 'true || fail',
             "release path: the refresh pushes before it finds its summary missing"),
    Mutation('torchimages/build/cache.py', 'feed("file", relative, oct(path.stat().st_mode & 0o777), file_sha256(path))',
             'feed("file", relative, file_sha256(path))', "release path: a file's mode is not a content change"),
    Mutation('torchimages/build/cache.py', 'if name not in PROXY_VARIABLES and name != "BASE_IMAGE":',
             'if True:', "release path: a proxy or the base's name changes the content digest"),
    Mutation('torchimages/build/sizes.py', 'return base_size + (dpkg - base_dpkg) + python',
             'return base_size + dpkg + python', "release path: the floor counts the base's packages twice"),
    Mutation('torchimages/build/sizes.py', '    if len(words) != 2 or not all(word.isdigit() for word in words):',
             '    if not words:', 'release path: a broken floor measurement read as a floor'),
    Mutation("torchimages/registry.py", 'None if absent."""\n        response = self.get(f"/v2/{name}/manifests/{tag}", '
             'headers={"Accept": PINNABLE_TYPES})', 'None if absent."""\n        response = self.get('
             'f"/v2/{name}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES})',
             "release path: lock asks for one platform's manifest, not the index docker pull pins"),
    Mutation('tests/smoke/probes/gpucheck.py', 'capability = word[:-4] if word.upper().endswith("+PTX") else word',
             'capability = word', "release path: a declared '9.0+PTX' never covered"),
    Mutation("torchimages/input/indexes.py", 'RELEASE_VERSION = re.compile(r"(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)")',
             'RELEASE_VERSION = re.compile(r"[0-9]+\\.[0-9]+\\.[0-9]+")', "release path: a refresh takes 02.03.01 as a release"),
    Mutation("torchimages/input/indexes.py", 'LIBRARY_PIN = re.compile(r"(0|[1-9][0-9]*)(\\.(0|[1-9][0-9]*)){1,3}")',
             'LIBRARY_PIN = re.compile(r".+")', "release path: a refresh takes any cuDNN pin"),
    Mutation("torchimages/input/indexes.py", " and release.metadata_urls[0].startswith(PYPI_FILES):", ":",
             "release path: a refresh given a mirror asks pypi.org"),
    Mutation("torchimages/input/indexes.py", "                if time.monotonic() > ends:", "                if False:",
             "release path: a trickling index hangs the refresh"),
    Mutation("torchimages/progress.py", "        message = visible(event.message)\n", "        message = event.message\n",
             "release path: escape sequences from a build or registry reach the terminal"),
    Mutation("torchimages/errors.py", '    text = CREDENTIALS.sub(r"\\1***@", text)\n', "",
             "release path: a URL's password printed in a message"),
    Mutation("torchimages/release.py", "        write_report(report, options.report_path)\n        try:",
             "        try:", "release path: a push cut short leaves no report to resume from"),
    # platforms: where a wheel is the CUDA build, and what the build refuses
    Mutation("torchimages/input/indexes.py",
             "release.cuda_platforms = {platform for platform in release.platforms if holds_on(marker, platform)}",
             "release.cuda_platforms = set(release.platforms)", "platforms: a CPU aarch64 wheel counted as the CUDA build"),
    Mutation("torchimages/input/specs.py", "            if release.has_wheel(build, python, machine):\n                continue",
             "            if True:\n                continue", "platforms: a platform without a wheel accepted"),
    Mutation("torchimages/input/compat.py", "return platform == UNLISTED_PLATFORM and python in self.python",
             "return python in self.python", "platforms: an unlisted platform assumed to have wheels"),
    Mutation("torchimages/input/specs.py",
             'return PlatformImage(variant, platform, f"{name}-{architecture(platform)}" if self.indexed else name, name)',
             "return PlatformImage(variant, platform, name, name)", "platforms: every platform's image under one name"),
    Mutation("torchimages/build/jobs.py", "base_image=(base_for(image.platform) or spec.base_image) if is_base",
             "base_image=(base_for(DEFAULT_PLATFORM) or spec.base_image) if is_base",
             "platforms: every platform's base FROM the default platform's"),
    Mutation("torchimages/build/inputs.py", "return dict(self.platform_bases).get(platform) or self.base_image",
             "return self.base_image", "platforms: --base-image PLATFORM=IMAGE ignored"),
    Mutation("torchimages/build/jobs.py", "        if found is None or found == job.platform:\n",
             "        if True:\n", "platforms: a FROM image of another platform accepted"),
    Mutation("torchimages/build/jobs.py", "        if job.platform == native:\n            return {}",
             "        if True:\n            return {}", "platforms: the torch install of another platform emulated"),
    Mutation("torchimages/build/jobs.py", "read = buildargs if job.platform == DEFAULT_PLATFORM else",
             "read = buildargs if True else", "platforms: the platform left out of the content digest"),
    Mutation("torchimages/build/inputs.py", 'return any(tag == "any" or tag.endswith(f"_{machine}") for tag in platforms)',
             "return True", "platforms: every platform's wheels in each context"),
    Mutation("torchimages/input/compat.py", "        return self.archs if machine == UNLISTED_PLATFORM else ()",
             "        return self.archs", "platforms: an arm64 image checked against x86_64's GPU generations"),
    Mutation("torchimages/verify/smoke.py", '"emulated": target.expected.get("platform", DEFAULT_PLATFORM) != self.engine.platform(),',
             '"emulated": False,', "platforms: an emulated image's suite runs torch.compile's C++ build"),
    Mutation("torchimages/publish/promote.py", '    return {**found, "variant": VARIANTS[arch]} if arch in VARIANTS else found',
             "    return found", "platforms: the index's arm64 entry without its variant"),
    Mutation("torchimages/publish/promote.py", "        for promotion in [*promotions, *indexes]:",
             "        for promotion in promotions:", "platforms: an index tag at another image overwritten"),
    Mutation("torchimages/publish/promote.py", "                if not member.body or member.digest != digest:",
             "                if False:", "platforms: an index over a member promote did not inspect"),
    Mutation("torchimages/publish/pushstage.py", "if all(image in pushed for _, image in members)}",
             "if any(image in pushed for _, image in members)}", "platforms: an index over some of the platforms"),
    Mutation("torchimages/publish/promotestage.py", "        if not any(p.state == \"failed\" for p in promotions):",
             "        if True:", "platforms: an index written over images not in place"),
    Mutation("torchimages/manifest.py",
             "        if (platform, image) not in listed or without_architecture(str(image), platform) != name:",
             "        if False:", "platforms: a manifest's index naming images it does not hold"),
    Mutation("torchimages/publish/push.py", "                failed_entries.add((record.entry, record.platform))",
             "                failed_entries.add((record.entry, \"linux/amd64\"))",
             "platforms: a base not pushed on arm64 lets its variants go"),
    Mutation("torchimages/input/listing.py", "for row in rows if row[\"variant\"] == \"base\"]",
             "for row in rows if row[\"variant\"] == \"base\" and row[\"platform\"] == \"linux/amd64\"]",
             "platforms: release.yml gets no job for arm64"),
    Mutation("tests/smoke/probes/gpucheck.py", "        if len(elsewhere if elsewhere else paths) > 1:",
             "        if len(paths) > 1:", "platforms: triton's libcupti counted as a second CUDA stack"),
    # devel: where its compiler comes from, what it is told, and how its GPU code is read
    Mutation("torchimages/input/specs.py", "        elif compiler.pypi is None:", "        elif False:",
             "devel: a CUDA line without nvcc on PyPI accepted"),
    Mutation("torchimages/input/specs.py",
             '        if "devel" in (self.entry.get("variants") or ()):\n            self.fail("variants", "devel: a cpu',
             '        if False:\n            self.fail("variants", "devel: a cpu', "devel: a cpu entry accepted"),
    Mutation("torchimages/input/specs.py", 'return ";".join([*archs[:-1], f"{archs[-1]}+PTX"]) if archs else ""',
             'return ";".join(archs)', "devel: no PTX of the newest generation"),
    Mutation("torchimages/build/jobs.py", 'return {"TORCH_CUDA_ARCH_LIST": job.spec.cuda_arch_list(job.platform)}',
             'return {"TORCH_CUDA_ARCH_LIST": job.spec.cuda_arch_list(DEFAULT_PLATFORM)}',
             "devel: an arm64 image told amd64's generations"),
    Mutation("torchimages/build/inputs.py", "or wheel_project(wheel.name) in wanted", "",
             "devel: its compiler wheels left out of a wheelhouse build"),
    Mutation("tests/smoke/probes/gpucheck.py", "        if ptx:\n            found.add((\"ptx\", sm))", "",
             "devel: a +PTX generation asked for no PTX"),
    Mutation("tests/smoke/probes/gpucheck.py", "            entry += entry_header + payload", "            entry = end",
             "devel: only the first entry of a fat binary read"),
    # fit: the one rule (templates/files/gpurules.py) and what carries its data from the specs to a release
    Mutation("templates/files/gpurules.py", 'if kind == "sm" and arch_major == major and arch_minor <= minor:',
             'if kind == "sm" and arch_major == major and arch_minor == minor:', "fit: a kernel reaches only its own minor"),
    Mutation("templates/files/gpurules.py", '    if ptx and driver_state_found == "minor-version compatibility":',
             "    if False:", "fit: PTX counted on a driver of minor-version compatibility"),
    Mutation("templates/files/gpurules.py", '        compat_package = image.get("flavor") == "ngc"',
             "        compat_package = True", "fit: forward compatibility assumed for a wheel-based image"),
    Mutation("templates/files/gpurules.py", "    if platform not in platforms:", "    if False:",
             "fit: another platform's image said to run"),
    Mutation("templates/files/gpurules.py", "FAILS if FAILS in kinds else UNKNOWN if UNKNOWN in kinds else RUNS",
             "FAILS if FAILS in kinds else RUNS", "fit: an image of unknown generations said to run"),
    Mutation("torchimages/verify/fit.py", "return 0 if any(f.runs and f.gpu for f in found) else 1",
             "return 0 if any(f.runs for f in found) else 1", "fit: a CPU image makes it exit 0"),
    Mutation("torchimages/input/specs.py", 'return " ".join(f"{arch}+PTX" if arch == ptx else arch for arch in',
             'return " ".join(arch for arch in', "fit: the PTX a wheel carries left unpublished"),
    Mutation("torchimages/build/jobs.py", 'GPU_ARCHS_LABEL: job.spec.gpu_archs(job.platform) or "none"',
             'GPU_ARCHS_LABEL: job.spec.gpu_archs(DEFAULT_PLATFORM) or "none"',
             "fit: an arm64 image labelled with amd64's generations"),
    Mutation("torchimages/publish/push.py", "platform=record.platform, runs_on=record.runs_on,",
             "platform=record.platform,", "fit: push leaves what a host needs out of the manifest"),
    Mutation("torchimages/input/grammar.py", '    if value == "none" or (0 < len(value) <= 200',
             '    if True or (0 < len(value) <= 200', "fit: any runs_on value read from a manifest"),
    Mutation("torchimages/build/stage.py", "versions=job.spec.versions(), runs_on=job.spec.runs_on(job.platform),",
             "versions=job.spec.versions(),", "fit: the report records no runs_on"),
    # realistic: bugs of the kinds a developer makes (a retry that misses a failure, a header not sent, a key ignored, an
    # off-by-one, a swapped argument), written without looking at the tests, each in the module that decides
    Mutation("torchimages/publish/push.py",
             "            except (PushError, requests.ConnectionError, requests.Timeout, requests.HTTPError) as exc:",
             "            except (PushError, requests.HTTPError) as exc:",
             "realistic: push: a dropped connection to the registry not retried"),
    Mutation("torchimages/publish/push.py",
             "            except (PushError, requests.ConnectionError, requests.Timeout, requests.HTTPError) as exc:",
             "            except (PushError, requests.ConnectionError, requests.Timeout) as exc:",
             "realistic: push: the registry's 5xx answer not retried"),
    Mutation("torchimages/publish/push.py", "return exc.response is not None and exc.response.status_code >= 500",
             "return exc.response is not None and exc.response.status_code >= 400",
             "realistic: push: the registry's 4xx answer retried"),
    Mutation("torchimages/publish/push.py", 'TRANSIENT = ("connection refused", "connection reset", ',
             'TRANSIENT = ("connection refused", ', "realistic: push: a reset connection in the push stream not retried"),
    Mutation("torchimages/publish/promote.py", "if (status is not None and status < 500) or attempt > self.retries:",
             "if status is not None or attempt > self.retries:", "realistic: promote: the registry's 5xx answer not retried"),
    Mutation("torchimages/publish/promote.py", "if (status is not None and status < 500) or attempt > self.retries:",
             "if (status is not None and status < 500) or attempt >= self.retries:",
             "realistic: promote: one try fewer than --retries allows"),
    Mutation("torchimages/registry.py", '    "application/vnd.docker.distribution.manifest.list.v2+json",\n    MANIFEST_TYPES,',
             "    MANIFEST_TYPES,", "realistic: lock: Docker's manifest list not asked for (the amd64 manifest pinned)"),
    Mutation("torchimages/registry.py", 'headers={**headers, "Authorization": f"Bearer {token}"}',
             'headers={"Authorization": f"Bearer {token}"}', "realistic: registry: the Accept header lost on the token's retry"),
    Mutation("torchimages/registry.py", 'token = data.get("token") or data.get("access_token") if',
             'token = data.get("token") if', "realistic: registry: a realm's OAuth2 access_token not taken"),
    Mutation("torchimages/registry.py", "response = self.session.request(method, self.base + path, data=data, verify=",
             "response = self.session.request(method, self.base + path, verify=",
             "realistic: registry: a PUT made again with the token sends no body"),
    Mutation("torchimages/registry.py", "response = self.session.get(realm, params=fields,",
             'response = self.session.get(realm, params={"service": fields.get("service", "")},',
             "realistic: registry: the token asked for without its scope"),
    Mutation("torchimages/input/lock.py", 'return sorted({spec.base_image for spec in plan.specs if "@" not in spec.base_image})',
             "return sorted({spec.base_image for spec in plan.specs})",
             "realistic: lock: a base already pinned by digest looked up again"),
    Mutation("torchimages/input/lock.py",
             "        name = rest  # docker.io/debian is Docker Hub's library/debian, as debian is\n",
             '        return Location(DOCKER_HUB, "docker.io", rest, tag)\n',
             "realistic: lock: docker.io/debian asked for without library/"),
    Mutation("torchimages/build/jobs.py",
             "            self.inputs.fill_context(context, installs_torch=job.variant == \"base\" and job.spec.flavor != \"ngc\",\n"
             "                                     platform=job.platform,\n"
             "                                     stack_wheels=job.spec.devel_wheels if job.variant == \"devel\" else ())\n"
             "            base_arg = (self.inputs.base_for(job.platform) if job.variant == \"base\" else job.base_image) or None\n"
             "            if why := self._platform_problem(job, base_arg or from_default(context)):\n"
             "                outcome = BuildOutcome(job.image, job.tag, error=why)\n"
             "                return self._ended(job, outcome, started, digest=None, previous=None, reused=False)\n"
             "            buildargs = {**self.inputs.buildargs(base_image=base_arg), **self._cross_args(job), **platform_args(job)}\n"
             "            digest = self._digests[job.image] = self._content_digest(job, context, buildargs)\n",
             "            base_arg = (self.inputs.base_for(job.platform) if job.variant == \"base\" else job.base_image) or None\n"
             "            if why := self._platform_problem(job, base_arg or from_default(context)):\n"
             "                outcome = BuildOutcome(job.image, job.tag, error=why)\n"
             "                return self._ended(job, outcome, started, digest=None, previous=None, reused=False)\n"
             "            buildargs = {**self.inputs.buildargs(base_image=base_arg), **self._cross_args(job), **platform_args(job)}\n"
             "            digest = self._digests[job.image] = self._content_digest(job, context, buildargs)\n"
             "            self.inputs.fill_context(context, installs_torch=job.variant == \"base\" and job.spec.flavor != \"ngc\",\n"
             "                                     platform=job.platform,\n"
             "                                     stack_wheels=job.spec.devel_wheels if job.variant == \"devel\" else ())\n",
             "realistic: build: the content digest taken before the wheelhouse is in the context"),
    Mutation("torchimages/input/grammar.py", "^(torch|torchvision|torchaudio|triton|nvidia-", "^(torch|torchvision|torchaudio|nvidia-",
             "realistic: grammar: a direct reference replaces triton"),
    Mutation("torchimages/input/grammar.py", "    name = canonicalize_name(requirement.name)\n", "    name = requirement.name\n",
             "realistic: grammar: a pinned name spelled otherwise (Triton, nvidia_nccl_cu12) takes a direct reference"),
    Mutation("torchimages/input/grammar.py", "|nvidia-[a-z0-9-]+|cuda-[a-z0-9-]+)$", "|nvidia-[a-z0-9-]+)$",
             "realistic: grammar: a direct reference replaces the cuda-* wheels"),
    Mutation("torchimages/input/refresh.py", 'if int(v.split(".")[0]) >= 11}', 'if int(v.split(".")[0]) >= 12}',
             "realistic: compat refresh: the CUDA 11 wheel indexes not read"),
    Mutation("templates/files/gpurules.py", 'if kind == "compute" and (arch_major, arch_minor) <= (major, minor):',
             'if kind == "compute" and arch_major <= major:', "realistic: gpurules: PTX compared by the major version only"),
    Mutation("templates/files/gpurules.py", 'found += ["sm_" + code] + (["compute_" + code] if ptx else [])',
             'found += ["compute_" + code] if ptx else ["sm_" + code]',
             "realistic: gpurules: a +PTX generation loses its own kernels"),
    Mutation("templates/files/gpurules.py", "    if have >= version_tuple(need):", "    if driver >= need:",
             "realistic: gpurules: driver versions compared as text (580.105 older than 580.95)"),
    Mutation("torchimages/release.py", 'err.print(f"[bold red]FAILED[/] {escape(record.error)}", markup=True',
             'err.print(f"[bold red]FAILED[/] {record.error}", markup=True',
             "realistic: a build failure's message printed as markup"),
    Mutation("torchimages/release.py", "{escape(result.image)}: {escape(line)}", "{escape(result.image)}: {line}",
             "realistic: a failed smoke check printed as markup"),
    Mutation("templates/files/jupyter-healthcheck", "'http://127.0.0.1:%s/api' %", "'http://127.0.0.1:%s/api/status' %",
             "realistic: jupyter: the healthcheck asks an endpoint that needs the token"),
    Mutation("templates/files/jupyter-healthcheck", "% os.environ.get('JUPYTER_PORT', '8888')", "% '8888'",
             "realistic: jupyter: the healthcheck ignores JUPYTER_PORT"),
    Mutation("torchimages/verify/fit.py",
             "platform = host.platform if host.platform in spec.platforms else spec.platforms[0]",
             "platform = spec.platforms[0]", "realistic: fit: every entry judged by its first platform's images"),
    Mutation("torchimages/verify/fit.py", 'return Host(platform, driver or first["driver"], capability, name,',
             'return Host(platform, first["driver"], capability, name,',
             "realistic: fit: --driver ignored when the GPU comes from nvidia-smi"),
    Mutation("templates/files/gpurules.py", 'DRIVER = re.compile(r"[0-9]{3}(\\.[0-9]{1,3}){0,2}")',
             'DRIVER = re.compile(r"[0-9]{3}(\\.[0-9]{2}){0,2}")', "realistic: fit: a driver with a three-digit part refused"),
    Mutation("templates/files/image-doctor", 'needs_gpu = image.get("flavor") in ("cuda", "ngc")',
             'needs_gpu = image.get("flavor") == "cuda"', "realistic: image-doctor: an ngc image without a GPU not warned"),
    Mutation("templates/files/image-doctor", 'compat = os.path.isdir("/usr/local/cuda/compat")',
             'compat = os.path.isdir("/usr/local/cuda-compat")',
             "realistic: image-doctor: the forward-compatibility package looked for in the wrong folder"),
    Mutation("templates/files/image-doctor", '(("cuda", 2), ("cudnn", 3), ("nccl", 3))', '(("cuda", 2), ("cudnn", 2), ("nccl", 3))',
             "realistic: image-doctor: a cuDNN of another patch release not named"),
    Mutation("torchimages/input/specs.py", "        return self.platforms != DEFAULT_PLATFORMS\n",
             "        return len(self.platforms) > 1\n", "realistic: platforms: an arm64-only entry gets no image index"),
    Mutation("torchimages/build/jobs.py", "base=built[0].image, base_for=base_for)", "base=built[0].name, base_for=base_for)",
             "realistic: platforms: a variant FROM its base's name, not its platform's image"),
    Mutation("torchimages/publish/promotestage.py",
             "plan.indexed_images(), candidates.repository, candidates.release)",
             "plan.indexed_images(), candidates.repository, candidates.pushed.name)",
             "realistic: platforms: the image index PUT under the candidate tag"),
    Mutation("torchimages/input/matrix.py", "    return [platform for platform in platforms if platform != DEFAULT_PLATFORM]",
             "    return list(platforms[1:])", "realistic: platforms: the default platform assumed to be listed first"),
    Mutation("templates/partials/devel.j2",
             "    TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST}\nENV PATH=${CUDA_HOME}/bin:${PATH}",
             "    TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST} \\\n    PATH=${CUDA_HOME}/bin:${PATH}",
             "realistic: devel: PATH set in the ENV that sets CUDA_HOME (nvcc not on PATH)"),
    Mutation("templates/partials/devel.j2", "    TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST}\n",
             '    TORCH_CUDA_ARCH_LIST="{{ spec.cuda_arch_list(default_platform) }}"\n',
             "realistic: devel: the arch list the build gives for another platform ignored"),
    Mutation("templates/partials/devel.j2", 'ARG TORCH_CUDA_ARCH_LIST="{{ spec.cuda_arch_list(default_platform) }}"',
             'ARG TORCH_CUDA_ARCH_LIST="{{ spec.gpu_archs(default_platform) }}"',
             "realistic: devel: TORCH_CUDA_ARCH_LIST without the newest generation's PTX"),
    Mutation("templates/partials/base-wheels.j2", "{{ install_torch() }}\n{{ install_rest() }}",
             "{{ install_rest() }}\n{{ install_torch() }}", "realistic: layers: BuildKit's pip layer below the torch layer"),
    Mutation("templates/partials/base-wheels.j2", "    /opt/venv/bin/pip install --no-cache-dir -c /tmp/torch-layer.txt \\\n",
             "    /opt/venv/bin/pip install --no-cache-dir \\\n",
             "realistic: layers: the pip layer free to move the torch layer's packages"),
    Mutation("templates/partials/base-wheels.j2",
             '--index-url "${TORCH_INDEX_URL}" \\\n        {{ ("torch==" ~ spec.torch) | shell_quote }}'
             '{% for pin in spec.domain_pins %} {{ pin | shell_quote }}{% endfor %} numpy; \\',
             '--index-url "${TORCH_INDEX_URL}" \\\n        {{ ("torch==" ~ spec.torch) | shell_quote }}'
             '{% for pin in spec.domain_pins %} {{ pin | shell_quote }}{% endfor %} numpy'
             '{% for requirement in spec.pip %} {{ requirement | shell_quote }}{% endfor %}; \\',
             "realistic: layers: the entry's pip packages in the torch layer"),
    Mutation("templates/partials/base-wheels.j2",
             "COPY --from=builder --chown=0:${USER_GID} /opt/venv /opt/venv\nCOPY --from=environment /tmp/delta/ /",
             "COPY --from=environment /tmp/delta/ /\nCOPY --from=builder --chown=0:${USER_GID} /opt/venv /opt/venv",
             "realistic: layers: the classic image's pip layer below the torch layer"),
]


def copy_tree(target: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_symlink():  # tests/smoke/probes/gpurules.py: a mutated rule reaches the probes too
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).symlink_to(source.readlink())
        elif source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def run_one(mutation: Mutation, timeout: float) -> tuple[Mutation, str, float]:
    """'killed' (a test failed), 'survived' (all passed), or why the mutation could not be applied."""
    with tempfile.TemporaryDirectory(prefix="mutant-") as tmp:
        tree = Path(tmp)
        copy_tree(tree)
        path = tree / mutation.path
        text = path.read_text()
        if text.count(mutation.before) != 1:
            return mutation, f"not applied ({text.count(mutation.before)} matches: update benchmarks/mutations.py)", 0.0
        path.write_text(text.replace(mutation.before, mutation.after))
        started = time.monotonic()
        env = {**os.environ, "TORCHIMAGES_ROOT": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
        refresh_snapshots(tree, env)
        try:
            result = subprocess.run([sys.executable, "-m", "pytest", "tests/unit", "-x", "-q", "-p", "no:cacheprovider"],
                                    cwd=tree, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return mutation, "killed (timeout)", time.monotonic() - started
        outcome = {0: "survived", 1: "killed"}.get(result.returncode, f"error (pytest exit {result.returncode})")
        caught_by = re.findall(r"^(?:FAILED|ERROR) (\S+)", result.stdout, re.M)
        return mutation, f"{outcome} by {caught_by[0]}" if caught_by else outcome, time.monotonic() - started


def refresh_snapshots(tree: Path, env: dict[str, str]) -> None:
    """Re-render images/ and the golden files, as whoever made the change would: a bug must be caught by a
    test of behaviour, not by a snapshot that merely differs."""
    release = json.loads((tree / "images" / "rendered.json").read_text())["release"]
    subprocess.run([sys.executable, "build.py", "render", "--tag", release], cwd=tree, env=env, capture_output=True,
                   timeout=120, check=False)
    subprocess.run([sys.executable, "-m", "pytest", "tests/unit/build/test_render.py", "-q", "-k", "golden", "-p",
                    "no:cacheprovider"], cwd=tree, env={**env, "UPDATE_GOLDEN": "1"}, capture_output=True, timeout=300,
                   check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", help="run the mutations whose description or file contains TEXT")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or args.only in m.what or args.only in m.path]
    started = time.monotonic()
    baseline = run_one(Mutation("matrix.yaml", "images:", "images:", "no change"), args.timeout)[1]
    if baseline != "survived":
        sys.exit(f"tests/unit fails on an unchanged copy of the tree ({baseline}): fix that first")
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda m: run_one(m, args.timeout), chosen))
    for mutation, outcome, seconds in results:
        verdict, _, caught_by = outcome.partition(" by ")
        print(f"{verdict:9.9s} {seconds:5.1f}s  {mutation.path}: {mutation.what}" + (f"\n{'':17s}caught by {caught_by}"
                                                                                     if caught_by else ""))
    killed = sum(outcome.startswith("killed") for _, outcome, _ in results)
    broken = [m for m, outcome, _ in results if not outcome.startswith(("killed", "survived"))]
    print(f"\nmutation score: {killed}/{len(results)} killed by tests/unit ({100 * killed / max(1, len(results)):.0f}%); "
          f"{len(broken)} not applied; {time.monotonic() - started:.0f} s")
    for mutation in broken:
        print(f"  not applied: {mutation.path}: {mutation.what}")


if __name__ == "__main__":
    main()
