"""The workflows' own steps, run here: ci.yml and release.yml, every `run:` step in order, each job in a fresh
copy of the working tree with a fresh venv (made by the workflow's own Install step), on this machine's
engine. Substituted: the GitHub contexts and secrets (the local registry with htpasswd and TLS), the job
matrix (the CPU entry), `--require-gpu` (no GPU here), the four actions (tests/integration/workflows.py
says what stands in for each) and `gh release` (tests/integration/data/gh-releases keeps GitHub releases in a
folder). The runner's environment gives the build inputs a machine without a registry needs
(TORCHIMAGES_BASE_IMAGE, TORCHIMAGES_WHEELHOUSE, TORCHIMAGES_OFFLINE) and the session's wheels of
requirements-dev.txt, which every Install step installs from (no index); the steps' text is not changed otherwise.
The unit-test step of ci.yml is not run again when this session runs tests/unit (it is the same command).
The release workflow runs once (a first release, with no previous one); how the next release reuses the previous one's
unchanged images and attaches the diff against it is the workflow's wiring, checked without a release-sized run
(tests/unit/publish/test_release_workflow.py), with the reuse itself proven on a real engine and registry
(tests/integration/build/test_cache_from.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
import yaml

from torchimages.engine import CONTAINERD_STORE, Engine
from torchimages.registry import RegistryClient

from ..buildpy import build_py
from .conftest import CPU_ENTRY, ROOT, SECRET_PROXY_PASSWORD, SECRET_TOKEN, EntryBuild, Registry
from .workflows import ACTIONS, Runner, WorkflowRun

pytestmark = [pytest.mark.lane("main"), pytest.mark.heavy]

RELEASE = "v0.1-wf"  # a release tag of its own: the workflows' images never replace the other tests'
WORKFLOWS = ROOT / ".github" / "workflows"


UNIT_STEP = ".venv/bin/python -m pytest tests/unit"


@pytest.fixture(scope="session")
def dev_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """requirements-dev.txt as wheels, made once: the venvs the workflows' Install steps create install from here."""
    folder = tmp_path_factory.mktemp("dev-wheels")
    made = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "-r", str(ROOT / "requirements-dev.txt"),
                           "-w", str(folder)], capture_output=True, text=True, timeout=900, check=False)
    assert made.returncode == 0, made.stderr[-3000:]
    return folder


@dataclass(frozen=True)
class BuildInputs:
    """What a runner of this machine is given: the base image, the CPU wheelhouse and the wheels of the venvs."""

    base_image: str
    wheelhouse: Path
    dev_wheels: Path


@pytest.fixture(scope="module")
def inputs(api: docker.APIClient, base_image: str, wheelhouse: Path, dev_wheels: Path) -> BuildInputs:
    return BuildInputs(base_image, wheelhouse, dev_wheels)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The folder of the module's workflow runs (a checkout and a venv per job): removed when the module ends."""
    folder = tmp_path_factory.mktemp("workflows")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def stand_ins(session: pytest.Session) -> dict[str, str]:
    """ci.yml's unit-test step is this session's own tests/unit, when the session runs them."""
    unit = ROOT / "tests" / "unit"
    if any(Path(item.path).is_relative_to(unit) for item in session.items):
        return {UNIT_STEP: "the same command's tests (tests/unit) run in this pytest session"}
    return {}


def runner_env(inputs: BuildInputs, folder: Path, release: str = RELEASE,
               github_releases: Path | None = None) -> dict[str, str]:
    """This machine as a runner: its environment, a docker config of its own, where its build inputs are, pip
    installing from the session's wheels, and `gh` answering from a folder of GitHub releases."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "DOCKER_CONFIG")}
    (folder / "docker-config").mkdir()
    # GitHub's hosted runners have the buildx plugin, which --builder buildkit uses: this machine's, from
    # scripts/install-buildx.sh, is the runner's
    plugins = docker_config() / "cli-plugins"
    assert (plugins / "docker-buildx").is_file(), f"no buildx plugin in {plugins}: run scripts/install-buildx.sh"
    (folder / "docker-config" / "cli-plugins").symlink_to(plugins)
    (folder / "bin").mkdir()
    (folder / "bin" / "gh").symlink_to(ROOT / "tests" / "integration" / "data" / "gh-releases")
    # A corporate runner's package index (with its token) and proxy: the same build inputs as the session's BuildKit
    # build of the CPU entry, whose cache the workflows' builds reuse; neither may reach a file the workflows write.
    return {**env, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(inputs.dev_wheels),
            "TORCHIMAGES_PIP_INDEX_URL": f"https://ci:{SECRET_TOKEN}@pypi.invalid/simple",
            "HTTPS_PROXY": f"http://builder:{SECRET_PROXY_PASSWORD}@127.0.0.1:9",
            "DOCKER_CONFIG": str(folder / "docker-config"), "GITHUB_REF_NAME": release, "GITHUB_RUN_ID": "4242",
            "TORCHIMAGES_BASE_IMAGE": inputs.base_image, "TORCHIMAGES_WHEELHOUSE": str(inputs.wheelhouse),
            "TORCHIMAGES_OFFLINE": "1",
            "PATH": f"{folder / 'bin'}:{env['PATH']}", "GH_RELEASES": str(github_releases or folder / "github-releases")}


def advisories(folder: Path) -> Path:
    """The runner's TORCHIMAGES_ADVISORIES: a folder of OSV advisories it holds, one of them for a Jinja2 older than
    the images' (so the audit runs in each image and passes)."""
    osv = folder / "osv"
    osv.mkdir()
    (osv / "GHSA-wf-0001.json").write_text(json.dumps({
        "id": "GHSA-wf-0001", "modified": "2026-12-01T00:00:00Z", "database_specific": {"severity": "HIGH"},
        "affected": [{"package": {"ecosystem": "PyPI", "name": "jinja2"},
                      "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "3.0.0"}]}]}]}))
    return osv


def docker_config() -> Path:
    """This machine's docker config folder, found as the docker CLI finds it."""
    return Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")


def cpu_matrix(folder: Path) -> Path:
    """matrix.yaml with only its CPU entry."""
    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    data["images"] = [entry for entry in data["images"] if entry["flavor"] == "cpu"]
    path = folder / "cpu-release.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def assert_all_ran(run: WorkflowRun) -> None:
    failed = run.failed()
    assert not failed, "\n\n".join(f"{s.job}: {s.name} failed (rc {s.returncode}):\n{s.output[-4000:]}" for s in failed)
    for step in run.steps:
        if step.kind == "action":  # listed and explained, never skipped silently
            assert step.note in ACTIONS.values(), step


@pytest.fixture(scope="module")
def ci_run(inputs: BuildInputs, workspace: Path, request: pytest.FixtureRequest) -> WorkflowRun:
    folder = workspace / "ci-workflow"
    folder.mkdir()
    runner = Runner(root=ROOT, workspace=folder, context={}, env=runner_env(inputs, folder),
                    stand_ins=stand_ins(request.session))
    run = runner.workflow(WORKFLOWS / "ci.yml")
    print(run.describe())
    return run


@dataclass(frozen=True)
class ReleaseRunner:
    """What both release runs share: the build inputs, the registry and the GitHub releases."""

    inputs: BuildInputs
    registry: Registry
    github_releases: Path
    signing_key: Path  # the SIGNING_KEY secret: a key build.py keygen made

    def run(self, release: str, folder: Path) -> tuple[WorkflowRun, Path]:
        secrets = {"secrets.REGISTRY": f"{self.registry.host}/ml/release", "secrets.REGISTRY_USER": self.registry.user,
                   "secrets.REGISTRY_PASSWORD": self.registry.password, "github.token": "token-of-the-run",
                   "secrets.SIGNING_KEY": self.signing_key.read_text(), "secrets.SIGNING_PASSWORD": ""}
        # This runner releases the entries it can build: the CPU entry of matrix.yaml (TORCHIMAGES_MATRIX), so that
        # `promote` finds every image of the release it was given (test_promote.py refuses a partial one).
        env = {**runner_env(self.inputs, folder, release, self.github_releases),
               "TORCHIMAGES_MATRIX": str(cpu_matrix(folder)), "TORCHIMAGES_ADVISORIES": str(advisories(folder))}
        runner = Runner(root=ROOT, workspace=folder, context=secrets, env=env, drop=("--require-gpu",),
                        keep_entry=lambda entry: entry["entry"] == CPU_ENTRY)
        run = runner.workflow(WORKFLOWS / "release.yml")
        print(run.describe())
        return run, Path(env["DOCKER_CONFIG"])


@pytest.fixture(scope="module")
def release_runner(inputs: BuildInputs, registry: Registry, workspace: Path) -> ReleaseRunner:
    (workspace / "github-releases").mkdir()
    assert build_py("keygen", "--out", str(workspace / "keys"), cwd=ROOT, timeout=60).returncode == 0
    return ReleaseRunner(inputs, registry, workspace / "github-releases", workspace / "keys" / "cosign.key")


@pytest.fixture(scope="module")
def github_releases(release_runner: ReleaseRunner) -> Path:
    return release_runner.github_releases


@pytest.fixture(scope="module")
def release_run(release_runner: ReleaseRunner, workspace: Path) -> tuple[WorkflowRun, Path]:
    (workspace / "release-workflow").mkdir()
    return release_runner.run(RELEASE, workspace / "release-workflow")


def test_ci_workflow_steps_pass_here(ci_run: WorkflowRun, api: docker.APIClient, cpu_buildkit_build: EntryBuild) -> None:
    assert_all_ran(ci_run)
    ran = {(s.job, s.name): s for s in ci_run.steps if s.kind == "run"}
    unit = ran[("lint-and-unit", "Unit tests, hadolint on every rendered Dockerfile")]
    assert unit.returncode == 0 and (unit.output or "this pytest session" in unit.note), unit
    report = json.loads((ci_run.workdirs["cpu-image"] / "report" / "build-report.json").read_text())
    assert {r["variant"] for r in report["images"]} == {"base", "jupyter", "ssh"}
    containerd = Engine(api=api).store() == CONTAINERD_STORE  # where DOCKER_HOST is a current engine
    for record in report["images"]:
        smoke = record["stages"]["smoke"]
        assert record["result"] == "built" and smoke["passed"] > 0 and smoke["failed"] == 0, record
        assert "(buildx)" in record["builder"], record["builder"]  # the BuildKit images whose suite passes
        held = api.inspect_image(record["image_id"])
        assert held["Id"] == record["image_id"], record
        if containerd:  # the size is the unpacked layers the tool counts, not the store's packed content
            assert "the containerd image store" in record["builder"] and record["size_bytes"] > 2 * held["Size"], record
        # the session's BuildKit images (test_buildkit.py) are these layers: this suite is theirs too
        session = cpu_buildkit_build.tags[record["variant"]]
        assert held["RootFS"]["Layers"] == \
               api.inspect_image(session)["RootFS"]["Layers"], (record["image"], session)


def test_release_workflow_pushes_the_cpu_entry_and_merges_the_manifest(release_run: tuple[WorkflowRun, Path],
                                                                      registry: Registry,
                                                                      release_runner: ReleaseRunner,
                                                                      workspace: Path) -> None:
    run, _ = release_run
    assert_all_ran(run)
    include = json.loads(run.outputs["matrix"]["include"])
    assert CPU_ENTRY in [e["entry"] for e in include], include
    assert any(s.note == "dropped --require-gpu" for s in run.steps), run.describe()
    manifest = json.loads((run.workdirs["manifest"] / "releases" / f"{RELEASE}.json").read_text())
    assert manifest["release"] == RELEASE and manifest["promoted_from"] == "rc.4242"
    # the SIGNING_KEY secret: each image attested in the build job, each release tag signed by promote
    assert manifest["signed_by"]["public_key"] in (release_runner.signing_key.parent / "cosign.pub").read_text()
    assert all(image["signature"] for image in manifest["images"]), manifest["images"]
    assert sorted(i["variant"] for i in manifest["images"]) == ["base", "jupyter", "ssh"]
    # the audit gate ran in each image with the runner's advisories (TORCHIMAGES_ADVISORIES) and passed
    assert {(i["audit"]["status"], i["audit"]["source"]) for i in manifest["images"]} == \
        {("passed", str(workspace / "release-workflow" / "osv"))}, [i["audit"] for i in manifest["images"]]
    client = RegistryClient(registry.host, username=registry.user, password=registry.password,
                            ca=registry.folder / "ca.crt")
    for image in manifest["images"]:
        assert image["tag"] == image["release_tag"] == f"{registry.host}/ml/release:{RELEASE}-{image['image']}", image
        for tag in (image["tag"], f"{registry.host}/ml/release:{RELEASE}-rc.4242-{image['image']}"):
            remote = client.tag("ml/release", tag.rsplit(":", 1)[1])
            assert remote is not None and remote.digest == image["digest"], (tag, image)


def test_release_workflow_writes_no_credentials(release_run: tuple[WorkflowRun, Path],
                                               release_runner: ReleaseRunner) -> None:
    run, config = release_run
    assert_all_ran(run)
    assert "building with BuildKit through" in "".join(s.output for s in run.steps), "the workflow did not use BuildKit"
    # buildx keeps its own state there (buildx/: node ID, current builder, build refs); the plugins are the runner's
    files = [p for p in config.rglob("*") if p.is_file() and not p.is_relative_to(config / "cli-plugins")]
    written = [str(p.relative_to(config)) for p in files if not p.is_relative_to(config / "buildx")
               and p.name != ".buildNodeID"]
    assert written == [], f"the push wrote into the docker config: {written}"
    password = release_runner.registry.password.encode()
    assert [str(p) for p in files if password in p.read_bytes()] == [], "the registry password is in the docker config"
    key_line = release_runner.signing_key.read_bytes().splitlines()[1]  # the private key, outside every workspace
    secrets = (password, SECRET_TOKEN.encode(), SECRET_PROXY_PASSWORD.encode(), key_line)
    written = [path for folder in run.workdirs.values() for path in folder.rglob("*") if path.is_file()
               and not path.is_relative_to(folder / ".venv") and not (ROOT / path.relative_to(folder)).exists()]
    assert len(written) > 20 and any(p.name.endswith(".spdx.json") for p in written), written
    leaked = [str(p) for p in written if any(secret in p.read_bytes() for secret in secrets)]
    assert leaked == [], f"a credential is in what the workflow wrote: {leaked}"


def test_the_first_release_has_no_previous_one_and_attaches_its_manifest(release_run: tuple[WorkflowRun, Path],
                                                                        github_releases: Path) -> None:
    run, _ = release_run
    assert_all_ran(run)
    notes = [s.output for s in run.steps if s.name.startswith("The previous release's manifest")]
    assert len(notes) == 2 and all(f"no published release yet: {RELEASE} is built" in n for n in notes), notes
    with tarfile.open(github_releases / RELEASE / f"{RELEASE}-manifest.tar.gz") as tar:
        names = tar.getnames()
    assert {f"{RELEASE}.json", f"{RELEASE}.md", f"{RELEASE}-diff.md", f"{RELEASE}.sbom", f"{RELEASE}.wheels"} <= set(names), names
    assert sum(name.endswith(".spdx.json") for name in names) == 3, names
    assert "nothing to compare with" in (github_releases / RELEASE / f"{RELEASE}-diff.md").read_text()
    hosts = json.loads((github_releases / RELEASE / f"{RELEASE}-hosts.json").read_text())  # an asset of its own
    assert len(hosts["tags"]) == 3 and all(platforms["linux/amd64"]["gpu_archs"] == "none"  # CPU images
                                           for platforms in (tag["platforms"] for tag in hosts["tags"])), hosts
