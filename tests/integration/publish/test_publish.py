"""Publishing to a real registry (Debian's docker-registry with htpasswd and TLS on 127.0.0.1)."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import docker
import pytest

from torchimages import wheellock
from torchimages.build import render
from torchimages.engine import Engine
from torchimages.errors import UserError
from torchimages.events import StageEvent
from torchimages.input.specs import Release
from torchimages.publish import push as publish
from torchimages.publish import sbom
from torchimages.registry import Credentials, RegistryClient
from torchimages.report import Report
from torchimages.settings import SETTINGS

from ..conftest import RELEASE, EntryBuild, Registry, build_entry, build_py, smoke_test, start_registry

pytestmark = [pytest.mark.lane("main")]


def publisher_to(api: docker.APIClient, registry: Registry, path: str, report: Report,
                 **options: object) -> publish.Publisher:
    """A publisher of the report's release to PATH on the registry, as its user."""
    return publish.Publisher(Engine(api=api), f"{registry.host}/{path}", Release(report.release),
                             ca=registry.folder / "ca.crt", credentials=Credentials(registry.user, registry.password),
                             **options)  # type: ignore[arg-type]


def push(registry: Registry, report: Path, manifest: Path, *extra: str, password: str | None = None,
         repository: str = "ml/pytorch") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TORCHIMAGES_REGISTRY_PASSWORD=password or registry.password)
    return build_py("push", "--tag", RELEASE, "--report", str(report), "--registry", f"{registry.host}/{repository}",
                    "--registry-user", registry.user, "--manifest", str(manifest), *extra, env=env, timeout=900)


def same_release(one: dict, other: dict) -> bool:
    """Two manifests of the same images: equal but for where each keeps its SBOM copies and wheel locks
    (MANIFEST.sbom/, MANIFEST.wheels/)."""
    def without_sbom_paths(manifest: dict) -> dict:
        return {**manifest, "images": [{**i, **{key: {k: v for k, v in i[key].items() if k != "path"}
                                                for key in ("sbom", "wheels") if key in i}}
                                       for i in manifest["images"]]}
    return without_sbom_paths(one) == without_sbom_paths(other)


@pytest.fixture(scope="module")
def pushed(registry: Registry, tested_report: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("pushed")
    report = folder / "report.json"
    report.write_text(tested_report.read_text())
    result = push(registry, report, folder / "release.json")
    assert result.returncode == 0, f"push failed:\n{result.stdout}\n{result.stderr}"
    return {"result": result, "report": report, "manifest": json.loads((folder / "release.json").read_text()),
            "markdown": (folder / "release.md").read_text(), "folder": folder}


def test_push_records_digests_that_the_registry_confirms(registry: Registry, pushed: dict) -> None:
    images = pushed["manifest"]["images"]
    assert len(images) == 3 and pushed["manifest"]["release"] == RELEASE
    client = RegistryClient(registry.host, username=registry.user, password=registry.password,
                            ca=registry.folder / "ca.crt")
    for image in images:
        remote = client.tag("ml/pytorch", image["tag"].rsplit(":", 1)[1])
        assert remote is not None and remote.digest == image["digest"], image
        assert f"`{image['reference']}`" in pushed["markdown"]
        assert image["smoke"]["failed"] == 0 and image["smoke"]["passed"] > 0


def test_pull_back_by_digest_and_run(api: docker.APIClient, registry: Registry, pushed: dict, cpu_build: EntryBuild) -> None:
    image = next(i for i in pushed["manifest"]["images"] if i["variant"] == "base")
    repository, digest = image["reference"].split("@")
    for tag in api.inspect_image(image["tag"])["RepoTags"]:
        if tag.startswith(registry.host):
            api.remove_image(tag)
    auth = {"username": registry.user, "password": registry.password}
    for chunk in api.pull(repository, tag=digest, stream=True, decode=True, auth_config=auth):
        assert "error" not in chunk, chunk
    container = api.create_container(image["reference"], entrypoint=[], command=["python", "-c",
                                     "import torch; print(torch.__version__)"])
    try:
        api.start(container)
        assert api.wait(container, timeout=120)["StatusCode"] == 0
        assert api.logs(container).decode().strip().split("+")[0] == cpu_build.spec.torch
    finally:
        api.remove_container(container, force=True)


def test_rerun_pushes_nothing_new(registry: Registry, pushed: dict) -> None:
    manifest = pushed["folder"] / "again.json"
    result = push(registry, pushed["report"], manifest)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count(" push unchanged ") == 3 and " push pushed " not in result.stderr, result.stderr
    assert same_release(json.loads(manifest.read_text()), pushed["manifest"])


def test_wrong_password_pushes_nothing(registry: Registry, tested_report: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(tested_report.read_text())
    result = push(registry, report, tmp_path / "release.json", password="not-the-password", repository="ml/wrong")
    assert result.returncode == 2
    assert "refused the credentials (HTTP 401)" in result.stderr and "Traceback" not in result.stderr
    assert "ml/wrong" not in registry.catalog()
    assert not (tmp_path / "release.json").exists()


def test_release_tags_are_immutable(api: docker.APIClient, registry: Registry, tested_report: Path, tmp_path: Path) -> None:
    report = Report.load(tested_report)
    base = next(r for r in report.images if r.variant == "base")
    other = next(r for r in report.images if r.variant == "jupyter")
    publisher = publisher_to(api, registry, "ml/immutable", report)
    first = Report(report.release, report.matrix, images=[copy.deepcopy(base)])
    [published] = publisher.publish(first)
    assert published.error is None and published.digest
    # Another image under the same release tag:
    impostor = copy.deepcopy(other)  # the jupyter image, recorded under the base image's name (so its release tag)
    impostor.image, impostor.entry, impostor.variant = base.image, base.entry, "base"
    impostor.tag = f"localhost/impostor:{base.tag.rsplit(':', 1)[1]}"
    api.tag(other.tag, "localhost/impostor", base.tag.rsplit(":", 1)[1])
    refused = publisher.publish(Report(report.release, report.matrix, images=[impostor]))[0]
    assert refused.error and "release tags are immutable" in refused.error and not refused.pushed
    publisher.force = True
    forced = publisher.publish(Report(report.release, report.matrix, images=[copy.deepcopy(impostor)]))[0]
    assert forced.error is None and forced.pushed and forced.digest and forced.digest != published.digest, forced
    client = RegistryClient(registry.host, username=registry.user, password=registry.password,
                            ca=registry.folder / "ca.crt")
    remote = client.tag("ml/immutable", base.tag.rsplit(":", 1)[1])
    assert remote is not None and remote.digest == forced.digest, "--force did not move the release tag"


def test_only_images_that_passed_smoke_are_pushed(api: docker.APIClient, registry: Registry, tested_report: Path) -> None:
    report = Report.load(tested_report)
    base = next(r for r in report.images if r.variant == "base")
    base.smoke.failed = 1
    publisher = publisher_to(api, registry, "ml/failed-smoke", report)
    outcomes = {o.image: o for o in publisher.publish(report)}
    assert outcomes[base.image].error == "not pushed: its smoke suite did not pass in this run"
    assert all("its base" in o.error for name, o in outcomes.items() if name != base.image)
    assert "ml/failed-smoke" not in registry.catalog()


def test_registry_down_mid_run(api: docker.APIClient, tested_report: Path, tmp_path: Path) -> None:
    down = start_registry(tmp_path / "down")
    report = Report.load(tested_report)
    said: list[StageEvent] = []

    def emit(event: StageEvent) -> None:
        said.append(event)
        if event.kind == "pushed" and [e.kind for e in said].count("pushed") == 1:
            os.kill(down.pid, signal.SIGTERM)  # the registry goes away after the first image

    publisher = publisher_to(api, down, "ml/down", report, retries=2, backoff=0.2, emit=emit)
    outcomes = publisher.publish(report)
    assert outcomes[0].error is None and outcomes[0].pushed
    for outcome in outcomes[1:]:
        assert outcome.error and "failed after 3 attempt(s)" in outcome.error, outcome
    assert any(e.kind == "note" and "retrying in" in e.message for e in said), said
    made = publish.manifest([report], f"{down.host}/ml/down")
    assert [i.image for i in made.images] == [outcomes[0].image], "no manifest entry for what failed"


def test_per_image_reports_merge_into_the_single_run_manifest(pushed: dict, tmp_path: Path) -> None:
    report = Report.load(pushed["report"])
    shutil.copytree(pushed["folder"] / f"{RELEASE}.sbom", tmp_path / f"{RELEASE}.sbom")  # they travel with the reports
    paths = []
    for index, record in enumerate(report.images):
        single = Report(report.release, report.matrix, images=[record])
        paths.append(single.write(tmp_path / f"image-{index}.json")[0])
    merged = tmp_path / "merged.json"
    result = build_py("manifest", "--registry", pushed["manifest"]["repository"], "--out", str(merged), *map(str, paths))
    assert result.returncode == 0, result.stderr
    assert same_release(json.loads(merged.read_text()), pushed["manifest"])


def test_credentials_from_stdin_and_from_the_docker_config_write_nothing(registry: Registry, pushed: dict,
                                                                         tmp_path: Path) -> None:
    """The same release pushed again (nothing new) with the two other ways of giving credentials."""
    config = tmp_path / "docker-config"
    config.mkdir()
    auth = base64.b64encode(f"{registry.user}:{registry.password}".encode()).decode()
    (config / "config.json").write_text(json.dumps({"auths": {registry.host: {"auth": auth}}}))
    before = (config / "config.json").read_bytes()
    base = ["push", "--tag", RELEASE, "--report", str(pushed["report"]), "--registry", f"{registry.host}/ml/pytorch"]
    env = {k: v for k, v in os.environ.items() if k != "TORCHIMAGES_REGISTRY_PASSWORD"}
    for name, extra, stdin in (("docker config", [], None),
                               ("stdin", ["--registry-user", registry.user, "--password-stdin"], registry.password + "\n")):
        result = build_py(*base, *extra, "--manifest", str(tmp_path / f"{len(extra)}.json"),
                          env={**env, "DOCKER_CONFIG": str(config)}, stdin=stdin, timeout=600)
        assert result.returncode == 0, f"push with credentials from the {name} failed:\n{result.stderr[-2000:]}"
        assert result.stderr.count(" push unchanged ") == 3, result.stderr
    assert (config / "config.json").read_bytes() == before and [p.name for p in config.iterdir()] == ["config.json"]


def test_the_smoke_suite_records_the_image_it_ran(tested_report: Path) -> None:
    for record in Report.load(tested_report).images:
        assert record.smoke.image_id == record.image_id and record.image_id.startswith("sha256:"), record


def test_a_retagged_image_is_not_pushed_with_another_images_results(api: docker.APIClient, registry: Registry,
                                                                    tested_report: Path) -> None:
    report = Report.load(tested_report)
    base = next(r for r in report.images if r.variant == "base")
    other = next(r for r in report.images if r.variant == "jupyter")
    api.tag(other.tag, "localhost/retagged", "x")  # the tag the report names now holds another image
    moved = copy.deepcopy(base)
    moved.tag = "localhost/retagged:x"
    publisher = publisher_to(api, registry, "ml/retagged", report)
    try:
        [outcome] = publisher.publish(Report(report.release, report.matrix, images=[moved]))
    finally:
        api.remove_image("localhost/retagged:x")
    assert outcome.error and "not the image its smoke suite tested" in outcome.error and not outcome.pushed, outcome
    assert "ml/retagged" not in registry.catalog()


HELPER = """#!/bin/sh
read -r server
echo "$1 $server" >> "{log}"
[ "$1" = get ] && [ "$server" = "{host}" ] || {{ echo "credentials not found in native keychain"; exit 1; }}
printf '{{"ServerURL": "%s", "Username": "{user}", "Secret": "{password}"}}' "$server"
"""


@pytest.mark.parametrize("config", ["credsStore", "credHelpers"])
def test_credentials_from_a_docker_credential_helper(registry: Registry, pushed: dict, tmp_path: Path, config: str) -> None:
    """After `docker login` through a helper (Docker Desktop, ECR, GCR), the config holds only the helper's name."""
    bin_dir, log = tmp_path / "bin", tmp_path / "helper.log"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-test"
    helper.write_text(HELPER.format(log=log, host=registry.host, user=registry.user, password=registry.password))
    helper.chmod(0o755)
    docker_config = tmp_path / "docker-config"
    docker_config.mkdir()
    value = "test" if config == "credsStore" else {registry.host: "test"}
    (docker_config / "config.json").write_text(json.dumps({config: value}))
    env = {k: v for k, v in os.environ.items() if k != "TORCHIMAGES_REGISTRY_PASSWORD"}
    result = build_py("push", "--tag", RELEASE, "--report", str(pushed["report"]), "--registry",
                      f"{registry.host}/ml/pytorch", "--manifest", str(tmp_path / "release.json"),
                      env={**env, "DOCKER_CONFIG": str(docker_config), "PATH": f"{bin_dir}:{env['PATH']}"}, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.count(" push unchanged ") == 3, result.stderr
    assert f"get {registry.host}" in log.read_text(), "the helper was never asked"


def test_each_pushed_image_has_an_sbom_of_its_debian_and_python_packages(pushed: dict, cpu_build: EntryBuild) -> None:
    """syft read each image its suite tested: the SBOM beside the manifest lists the packages with their versions."""
    for image in pushed["manifest"]["images"]:
        entry = image["sbom"]
        path = pushed["folder"] / entry["path"]
        assert entry["path"] == f"release.sbom/{image['image']}.spdx.json"
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"]
        table = sbom.packages(path)
        assert table["pypi"]["torch"].split("+")[0] == cpu_build.spec.torch, table["pypi"].get("torch")
        assert "numpy" in table["pypi"] and {"bash", "libc6", "tini"} <= table["deb"].keys()
        assert all(entry["packages"][kind] >= len(names) > 0 for kind, names in table.items() if kind in ("deb", "pypi"))
        if image["variant"] == "jupyter":
            assert table["pypi"]["jupyterlab"] == SETTINGS.jupyterlab
        if image["variant"] == "ssh":
            assert "openssh-server" in table["deb"]


def test_each_pushed_image_has_its_wheel_lock_beside_the_manifest(pushed: dict, wheelhouse: Path) -> None:
    """The lock the build recorded travels into the manifest as an asset (MANIFEST.wheels/IMAGE.txt, by sha256), and
    the release's locks check out against the wheelhouse it was built from."""
    records = {r.image: r for r in Report.load(pushed["report"]).images}
    for image in pushed["manifest"]["images"]:
        entry = image["wheels"]
        path = pushed["folder"] / entry["path"]
        assert entry["path"] == f"release.wheels/{image['image']}.txt"
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"]
        assert path.read_text().splitlines() == records[image["image"]].wheels and entry["count"] > 10
    checked = build_py("wheels", "check", str(pushed["folder"] / "release.json"), "--wheelhouse", str(wheelhouse),
                       "--offline")
    assert checked.returncode == 0 and "100 of 100 locked wheels served" in checked.stdout, checked.stderr


def linked_copy(folder: Path, out: Path) -> Path:
    """A wheelhouse holding the same files (hard links where the filesystem allows, else copies)."""
    out.mkdir()
    for wheel in folder.glob("*.whl"):
        try:
            os.link(wheel, out / wheel.name)
        except OSError:
            shutil.copyfile(wheel, out / wheel.name)
    return out


def environment_layers(api: docker.APIClient, tag: str) -> list[str]:
    """The diff IDs of the layers the classic builder copied to / (the torch layer's pieces, the `pip:` layer), found by the
    history entries that made a layer (a RUN, a COPY or the base's import; the rest change only the configuration)."""
    layers = api.inspect_image(tag)["RootFS"]["Layers"]
    made = [entry["CreatedBy"] for entry in reversed(api.history(tag))
            if "#(nop)" not in entry["CreatedBy"] or re.search(r"#\(nop\) +(COPY|ADD) ", entry["CreatedBy"])]
    assert len(made) == len(layers), (made, layers)
    return [layer for layer, created in zip(layers, made, strict=True) if re.search(r"COPY dir:\w+ in / *$", created)]


def test_a_release_is_rebuilt_from_its_lock_and_a_wheel_no_source_serves_is_refused_first(
        api: docker.APIClient, pushed: dict, cpu_build: EntryBuild, wheelhouse: Path, tmp_path: Path) -> None:
    """`build --from-release`: the base image rebuilt from the release's manifest, pip in hash-checking mode from each
    step's lock, installs exactly the locked files (the rebuilt image's lock is the release's) FROM the image the release
    was built from, and passes the suite; from a wheelhouse missing one locked wheel the same command stops before any
    build with one line naming the wheel, its sha256 and where it was looked for. (A variant's step is installed from
    its lock the same way, macros.j2: locked_or; the whole CPU release, rebuilt by hand, is in docs/building.md.)"""
    manifest = pushed["folder"] / "release.json"
    name = cpu_build.spec.name
    locks = {image["image"]: (pushed["folder"] / image["wheels"]["path"]).read_text().splitlines()
             for image in pushed["manifest"]["images"]}
    gone = next(wheellock.parse_line(line) for line in locks[name] if "# torch: numpy-" in line)
    partial = linked_copy(wheelhouse, tmp_path / "partial")
    (partial / gone.file).unlink()
    images = tmp_path / "images"
    assert build_py("render", "--tag", f"{RELEASE}.1", "--out", str(images)).returncode == 0
    refused = build_py("build", "--tag", f"{RELEASE}.1", "--images", str(images), "--only", name,
                       "--from-release", str(manifest), "--wheelhouse", str(partial), "--offline", "--plain",
                       "--report", str(tmp_path / "refused.json"))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert (f"--from-release {manifest}: {gone.pin} ({gone.file}, sha256:{gone.sha256}) is served by no source: "
            f"wheelhouse {partial}") in refused.stderr, refused.stderr
    assert "building with" not in refused.stderr and not (tmp_path / "refused.json").exists()

    rebuilt = build_entry(cpu_build.spec, tmp_path / "rebuild", "--from-release", str(manifest), "--wheelhouse",
                          str(wheelhouse), "--offline", release=f"{RELEASE}.1", only=name)
    said = f"from release {RELEASE} ({manifest}): images 1, locked wheels {len(locks[name])},"
    assert said in rebuilt.result.stderr, rebuilt.result.stderr
    records = {record["image"]: record for record in rebuilt.report["images"]}
    assert set(records) == {name}
    for image, record in records.items():
        assert record["wheels"] == locks[image], image
    built_from = next(i for i in pushed["manifest"]["images"] if i["image"] == name)["built_from"]
    assert built_from["image"] == cpu_build.options[1] and built_from["id"] == api.inspect_image(built_from["image"])["Id"]
    assert records[name]["materials"]["from"] == built_from["image"]
    # the time the release gave its environment's files, recorded in its manifest and given again
    epoch = next(i for i in pushed["manifest"]["images"] if i["image"] == name)["source_date_epoch"]
    assert epoch == records[name]["materials"]["source_date_epoch"] == SETTINGS.source_date_epoch
    # The same wheels, the same environment layers: the rebuild's torch and `pip:` layers are the release's, byte for
    # byte (docs/building.md, "Reproducible layers"), though pip installed from the lock and ran again.
    released = environment_layers(api, cpu_build.tags["base"])
    assert len(released) == len(render.environment_pieces(cpu_build.spec)) + 1, released
    assert environment_layers(api, rebuilt.tags["base"]) == released
    (tmp_path / "smoke").mkdir()
    result, report = smoke_test(rebuilt, tmp_path / "smoke", only=name)
    assert result.returncode == 0, result.stderr[-3000:]
    assert all(r["stages"]["smoke"]["failed"] == 0 and r["stages"]["smoke"]["passed"] > 10 for r in report["images"]), report


def test_a_failed_sbom_scan_says_why(api: docker.APIClient, tmp_path: Path) -> None:
    """An image the engine does not hold: the error carries syft's own reason, not an empty line."""
    missing = "sha256:" + "0" * 64
    with pytest.raises(UserError) as failure:
        sbom.generate(missing, tmp_path / "out.spdx.json", cache=tmp_path / "cache")
    message = str(failure.value)
    assert message.startswith("syft could not read sha256:000000000000: "), message
    assert "could not determine source" in message and "\x1b[" not in message, message
    assert not (tmp_path / "cache" / f"{missing.replace(':', '-')}.spdx.json").exists()
