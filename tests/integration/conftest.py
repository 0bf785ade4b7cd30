"""Integration tests: a real Docker engine and real builds.

They skip only when no engine answers and CI is unset; under CI a missing engine fails them.
The CPU entry of matrix.yaml is built once per session from a Debian base made with
debootstrap, torch and the rest from a local wheelhouse (offline), the way CI runs it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
import requests
import yaml

from tests.buildpy import ROOT, build_py
from tests.session import engines, lanes
from torchimages.containers import Containers
from torchimages.engine import Engine
from torchimages.input import compat, matrix, specs
from torchimages.settings import SETTINGS
from torchimages.verify.smoke import expected_of

BASE_IMAGE = "torchimages/debian:bookworm-minbase"
RELEASE = "it"
CPU_GLOB = "torch*-cpu-py*"
CPU_ENTRY = "torch2.13.0-cpu-py3.11"
# The flagship: builds here from PyPI's default (cu121) torch wheels, on Debian's Python 3.11.
CUDA_ENTRY = "torch2.3.1-cu121-cudnn8.9-py3.11"
DATA = Path(__file__).parent / "data"
NGC_MATRIX, NGC_COMPAT = DATA / "ngc-shaped.matrix.yaml", DATA / "ngc-shaped.compat.yaml"
# Given to the build as a pip index and a proxy: neither may reach any image.
SECRET_TOKEN = "s3cr3t-index-token-4242"
SECRET_PROXY_PASSWORD = "proxy-pa55word-4242"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--compare-builders", action="store_true",
                     help="also build the CUDA entry and the ngc flavor with the classic builder and compare them with "
                          "BuildKit's builds (test_buildkit.py; about 10 minutes and 12 GB more)")
    parser.addoption("--cuda13", action="store_true",
                     help="also build the CUDA 13.0 line (torch 2.14.0 cu130, Python 3.11) from PyPI's wheels and put it "
                          "through the suite (test_cuda_and_ngc_images.py; about 5 minutes, 3 GB of wheels, 6.3 GB)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "compare_builders: runs only with --compare-builders (a CUDA-sized image "
                                       "built by both builders)")
    config.addinivalue_line("markers", "cuda13: runs only with --cuda13 (the CUDA 13.0 line, a CUDA-sized image)")


# marker -> the option that runs it
OPT_IN = {"compare_builders": "--compare-builders", "cuda13": "--cuda13"}
CUDA13_MATRIX = DATA / "cu130-py311.matrix.yaml"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The opt-in CUDA-sized tests (the builder comparisons without --compare-builders, the CUDA 13.0 line without
    --cuda13) are deselected (counted as such), not skipped."""
    off = [marker for marker, option in OPT_IN.items() if not config.getoption(option)]
    opted_in = [item for item in items if any(item.get_closest_marker(marker) for marker in off)]
    if opted_in:
        config.hook.pytest_deselected(items=opted_in)
        items[:] = [item for item in items if item not in opted_in]


def engine_client(timeout: int = 30) -> docker.APIClient | None:
    try:
        client = docker.APIClient(base_url=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"), version="auto",
                                  timeout=timeout)
        client.ping()
    except Exception:
        return None
    return client


def pytest_report_header() -> str:
    """The free disk at the start, in the first lines of a run: a full disk fails pushes and builds late and far from
    its cause (scripts/free-disk.sh makes room under .ci/run)."""
    where = [Path(p) for p in ("/var/lib/docker", "/tmp") if Path(p).exists()]
    return "disk free: " + ", ".join(f"{p} {shutil.disk_usage(p).free / 2**30:.0f} GB" for p in where)


def cli_reaches_an_engine() -> bool:
    """Whether the docker CLI gets an answer from an engine (it may find one the SDK does not)."""
    try:
        return subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, timeout=30,
                              check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def api() -> docker.APIClient:
    """The engine. Integration tests skip only where no engine answers at all and CI is unset."""
    client = engine_client()
    if client is None:
        address = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        if cli_reaches_an_engine():
            pytest.fail(f"the docker CLI reaches an engine, the Docker SDK does not at {address}: set DOCKER_HOST")
        if os.environ.get("CI"):
            starts = next((lanes.STARTED_BY[lane] for lane in lanes.LANES[1:] if address == lanes.engine_of(lane)),
                          lanes.STARTED_BY[lanes.MAIN])
            pytest.fail(f"CI is set but no Docker engine answers at {address}: .ci/run must start one ({starts})")
        pytest.skip("no Docker engine answers and CI is unset")
    return client


def run(command: list[str], timeout: float, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)


def run_in(api: docker.APIClient, tag: str, command: list[str], *, must_succeed: bool = True) -> tuple[int, str]:
    """Run a command in a fresh container of `tag`: its exit code and output (the container is removed)."""
    status, output = Containers(Engine(api=api)).run_once(tag, command=command, entrypoint=[], timeout=300)
    assert status == 0 or not must_succeed, f"{command} failed in {tag}: {output}"
    return status, output


@dataclass(frozen=True)
class BuilderWay:
    """One way build.py builds: its options, its environment and how it names itself ("building with ...")."""

    name: str
    options: tuple[str, ...]
    env: dict[str, str]
    says: str


@pytest.fixture(scope="session")
def builder_ways(tmp_path_factory: pytest.TempPathFactory) -> dict[str, BuilderWay]:
    """The classic builder; BuildKit through buildx (scripts/install-buildx.sh, as on GitHub's runners); BuildKit
    through Debian's 20.10 client with DOCKER_BUILDKIT=1, which is what a docker config without the plugin gives."""
    env = dict(os.environ)
    no_plugins = dict(env, DOCKER_CONFIG=str(tmp_path_factory.mktemp("docker-config-without-plugins")))
    return {"classic": BuilderWay("classic", (), env, "the classic builder through the Docker SDK"),
            "buildx": BuilderWay("buildx", ("--builder", "buildkit"), env, "(buildx)"),
            "docker-buildkit": BuilderWay("docker-buildkit", ("--builder", "buildkit"), no_plugins,
                                          "(DOCKER_BUILDKIT=1)")}


@pytest.fixture(scope="session", params=["classic", "buildx", "docker-buildkit"])
def builder_way(request: pytest.FixtureRequest, builder_ways: dict[str, BuilderWay]) -> BuilderWay:
    way = builder_ways[request.param]
    if way.name == "buildx":
        buildx = run(["docker", "buildx", "version"], timeout=60, env=way.env)
        assert buildx.returncode == 0, f"the docker CLI has no buildx plugin: run scripts/install-buildx.sh\n{buildx.stderr}"
    return way


@pytest.fixture(scope="session")
def base_image(api: docker.APIClient) -> str:
    result = run(["bash", str(ROOT / "scripts" / "make-base-image.sh"), BASE_IMAGE], timeout=600)
    assert result.returncode == 0, f"making the base image failed:\n{result.stdout}{result.stderr}"
    return BASE_IMAGE


ARM64_BASE_IMAGE = "torchimages/debian:bookworm-minbase-arm64"


@pytest.fixture(scope="session")
def arm64_base_image(api: docker.APIClient) -> str:
    """Debian bookworm for linux/arm64, made here under emulation (trixie's qemu 10, registered by
    scripts/setup-emulation.sh) and kept between sessions like the other bases."""
    script("setup-emulation.sh", timeout=300)
    script("make-base-image.sh", ARM64_BASE_IMAGE, "arm64", timeout=900)
    return ARM64_BASE_IMAGE


def script(name: str, *args: str, timeout: float = 900, env: dict[str, str] | None = None) -> None:
    result = run(["bash", str(ROOT / "scripts" / name), *args], timeout=timeout, env={**os.environ, **(env or {})})
    assert result.returncode == 0, f"scripts/{name} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    folder = ROOT / ".cache" / "wheelhouse"
    script("make-ci-wheelhouse.sh", str(folder), entry_spec(CPU_ENTRY).torch, SETTINGS.jupyterlab, SETTINGS.notebook)
    return folder


# Where a CUDA-sized build takes its wheels: PyPI itself (torch's CUDA builds are PyPI's default), reached from the
# build's containers through this machine's TLS-intercepting proxy, as a corporate network is, so the build trusts the
# machine's CA bundle (--ca-bundle). The wheels are then downloaded inside the install step and gone with it: no
# wheelhouse on the host and no second copy in the builder's context (3 GB each).
PYPI = "https://pypi.org/simple"


def from_pypi() -> tuple[str, ...]:
    bundle = os.environ.get("SSL_CERT_FILE") or ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"
    return "--torch-index-url", PYPI, "--ca-bundle", bundle


def entry_spec(name: str, matrix_file: Path = ROOT / "matrix.yaml") -> specs.ImageSpec:
    """An entry of a matrix: the tests' expectations come from the matrix, not from the tests."""
    plan = specs.resolve(matrix.load(matrix_file))
    return next(spec for spec in plan.specs if spec.name == name)


@dataclass(frozen=True)
class EntryBuild:
    """A matrix entry built with its variants in this session, and its build report."""

    spec: specs.ImageSpec
    result: subprocess.CompletedProcess[str]
    report: dict
    report_path: Path
    tags: dict[str, str]  # variant -> tag
    matrix: Path
    env: dict[str, str]
    options: tuple[str, ...] = ()  # the build inputs it was built with: the same ones rebuild it from the cache
    release: str = RELEASE

    @property
    def expected(self) -> dict:
        return expected_of(self.spec)

    def record(self, variant: str) -> dict:
        return next(r for r in self.report["images"] if r["variant"] == variant)


def build_entry(spec: specs.ImageSpec, out: Path, *options: str, matrix_file: Path = ROOT / "matrix.yaml",
                env: dict[str, str] | None = None, release: str = RELEASE, only: str | None = None) -> EntryBuild:
    """Render the matrix into `out` and build one entry with its variants (or the images `only` names), as CI does."""
    env = env or dict(os.environ)
    images = out / "images"
    rendered = build_py("render", "--matrix", str(matrix_file), "--tag", release, "--out", str(images), env=env)
    assert rendered.returncode == 0, rendered.stderr
    untag_earlier_builds(f":{release}-{spec.name}")
    result = build_py("build", "--matrix", str(matrix_file), "--tag", release, "--images", str(images), "--only",
                      only or f"{spec.name}*", "--plain", *options, "--report", str(out / "report.json"),
                      "--logs", str(out / "logs"), env=env, timeout=2400)
    assert result.returncode == 0, f"building {spec.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    report = json.loads((out / "report.json").read_text())
    tags = {r["variant"]: r["tag"] for r in report["images"]}
    return EntryBuild(spec=spec, result=result, report=report, report_path=out / "report.json", tags=tags,
                      matrix=matrix_file, env=env, options=options, release=release)


def untag_earlier_builds(marker: str) -> None:
    """The tags holding `marker` (":RELEASE-ENTRY") that an earlier session left (its CPU builds stay when it ends) go
    first, their layers kept (the builders' caches): an image already under its tag here is not built again
    (build/jobs.py), and these tests check what the build did."""
    client = engine_client(timeout=300)
    for tag in [t for image in (client.images() if client else []) for t in image.get("RepoTags") or () if marker in t]:
        with contextlib.suppress(docker.errors.NotFound):
            client.remove_image(tag, noprune=True)


@contextlib.contextmanager
def tags_set_aside(api: docker.APIClient, tags: list[str]) -> Iterator[None]:
    """For a rebuild of images the session already holds, which would otherwise not run (build/jobs.py: an image
    already under its tag is not built again): the tags go while it runs, each image held by a second tag meanwhile,
    so the rebuild runs the builder itself; a tag the rebuild did not write again is put back."""
    held = {tag: f"torchimages-test:aside-{index}" for index, tag in enumerate(tags)}
    for tag, aside in held.items():
        api.tag(tag, *aside.split(":"))
        api.remove_image(tag)
    try:
        yield
    finally:
        for tag, aside in held.items():
            if not api.images(name=tag):
                api.tag(aside, *tag.rsplit(":", 1))
            api.remove_image(aside)


def smoke_test(build: EntryBuild, folder: Path, only: str | None = None) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`build.py test` on a built entry (or the images `only` matches), two suites at a time, with --junit; the result
    and the report it wrote (`_path`; the JUnit files' folder: `_junit`)."""
    report = folder / "report.json"
    shutil.copyfile(build.report_path, report)
    platforms = [word for platform in sorted({r["platform"] for r in build.report["images"]})
                 for word in ("--platform", platform)]  # the platforms it was built for
    result = build_py("test", "--matrix", str(build.matrix), "--tag", build.release, "--only", only or f"{build.spec.name}*",
                      *platforms, "--jobs", "2", "--report", str(report), "--junit", str(folder / "junit"), timeout=1200,
                      env=build.env)
    return result, {**json.loads(report.read_text()), "_path": str(report), "_junit": str(folder / "junit")}


@pytest.fixture(scope="session")
def cpu_build(api: docker.APIClient, base_image: str, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> EntryBuild:
    """Build the CPU entry with both variants, as CI does, with secrets in the pip index URL and proxy."""
    env = dict(os.environ, HTTPS_PROXY=f"http://builder:{SECRET_PROXY_PASSWORD}@127.0.0.1:9")
    return kept(lambda: build_entry(entry_spec(CPU_ENTRY), tmp_path_factory.mktemp("cpu-build"), "--base-image",
                                    base_image, "--wheelhouse", str(wheelhouse), "--offline",
                                    "--pip-index-url", f"https://ci:{SECRET_TOKEN}@pypi.invalid/simple", env=env))


@pytest.fixture(scope="session")
def cpu_buildkit_build(cpu_build: EntryBuild, tmp_path_factory: pytest.TempPathFactory) -> EntryBuild:
    """The CPU entry again, built by BuildKit from the same inputs under a release of its own."""
    return kept(lambda: build_entry(cpu_build.spec, tmp_path_factory.mktemp("cpu-buildkit"), *cpu_build.options,
                                    "--builder", "buildkit", env=cpu_build.env, release=f"{RELEASE}-bk"))


@pytest.fixture(scope="session")
def cpu_docker_buildkit_build(cpu_build: EntryBuild, builder_ways: dict[str, BuilderWay],
                              tmp_path_factory: pytest.TempPathFactory) -> EntryBuild:
    """The CPU entry by BuildKit through Debian's 20.10 client (DOCKER_BUILDKIT=1: a docker config without the buildx
    plugin), the way a machine with only Debian's docker.io builds."""
    way = builder_ways["docker-buildkit"]
    env = dict(cpu_build.env, DOCKER_CONFIG=way.env["DOCKER_CONFIG"])
    return kept(lambda: build_entry(cpu_build.spec, tmp_path_factory.mktemp("cpu-docker-buildkit"),
                                    *cpu_build.options, *way.options, env=env, release=f"{RELEASE}-dbk"))


@pytest.fixture(scope="session")
def smoke_run(cpu_build: EntryBuild, tmp_path_factory: pytest.TempPathFactory) -> tuple[object, dict]:
    return smoke_test(cpu_build, tmp_path_factory.mktemp("smoke"))


# --- the flagship CUDA entry, built from PyPI's CUDA wheels on a local CUDA base ----------------------

@pytest.fixture(scope="session")
def tested_report(smoke_run: tuple) -> Path:
    """The report of this session's build and smoke run (every CPU image passed)."""
    result, report = smoke_run
    assert result.returncode == 0, result.stderr[-3000:]
    return Path(report["_path"])


@pytest.fixture(scope="session")
def cuda_base_image(base_image: str) -> str:
    spec = entry_spec(CUDA_ENTRY)
    image = f"torchimages/cuda:{spec.cuda_image}-base-debian12"
    script("make-cuda-base-image.sh", spec.cuda_image, image, base_image)
    return image


def removed_at_the_end(api: docker.APIClient, make: Callable[[], EntryBuild]) -> Iterator[EntryBuild]:
    """A CUDA-sized build (about 6 GB) lives as long as the module that asked for it: its BuildKit cache (as large
    again, and not read by the module's tests) goes as soon as it is built, its images when the module ends, so that
    the session holds one at a time, and for as short a time as it can."""
    before = engines.EngineState.of(api)
    build = make()
    before.prune_cache(api, engines.KEPT_CACHE)
    yield build
    for tag in build.tags.values():
        with contextlib.suppress(docker.errors.NotFound):
            api.remove_image(tag, force=True)


@pytest.fixture(scope="module")
def cuda_build(api: docker.APIClient, cuda_base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EntryBuild]:
    """The CUDA entry with BuildKit, as the release workflow builds it: the one CUDA-sized build of a session."""
    yield from removed_at_the_end(api, lambda: build_entry(
        entry_spec(CUDA_ENTRY), tmp_path_factory.mktemp("cuda-build"), "--base-image", cuda_base_image,
        *from_pypi(), "--builder", "buildkit"))


@pytest.fixture(scope="module")
def cuda13_build(api: docker.APIClient, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EntryBuild]:
    """The CUDA 13.0 line (only with --cuda13): torch 2.14.0 cu130 for Python 3.11 (the default matrix asks 3.12,
    which the Debian base does not carry and no reachable source provides) from PyPI's wheels, with BuildKit, on a
    local CUDA 13.0 base."""
    spec = specs.resolve(matrix.load(CUDA13_MATRIX)).specs[0]
    base = f"torchimages/cuda:{spec.cuda_image}-base-debian12"
    script("make-cuda-base-image.sh", spec.cuda_image, base, base_image)
    yield from removed_at_the_end(api, lambda: build_entry(
        spec, tmp_path_factory.mktemp("cuda13-build"), "--base-image", base, *from_pypi(), "--builder", "buildkit",
        matrix_file=CUDA13_MATRIX))


@pytest.fixture(scope="module")
def cuda_classic_build(api: docker.APIClient, cuda_build: EntryBuild,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[EntryBuild]:
    """The CUDA entry again, by the classic builder from the same inputs under a release of its own (only with
    --compare-builders)."""
    options = tuple(o for o in cuda_build.options if o not in ("--builder", "buildkit"))
    yield from removed_at_the_end(api, lambda: build_entry(cuda_build.spec, tmp_path_factory.mktemp("cuda-classic"), *options,
                                                   env=cuda_build.env, release=f"{RELEASE}-classic"))


@pytest.fixture(scope="module")
def cuda_smoke(cuda_build: EntryBuild, tmp_path_factory: pytest.TempPathFactory) -> tuple[object, dict]:
    return smoke_test(cuda_build, tmp_path_factory.mktemp("cuda-smoke"))


# --- the ngc flavor, on an NGC-shaped base made from the CUDA entry's image --------------------------------

def ngc_env() -> dict[str, str]:
    return dict(os.environ, TORCHIMAGES_EXTRA_COMPAT=str(NGC_COMPAT))


@pytest.fixture(scope="module")
def ngc_base_image(api: docker.APIClient, cuda_build: EntryBuild) -> Iterator[str]:
    """The NGC-shaped base that the test-only compat row (data/ngc-shaped.compat.yaml) describes, made from the CUDA
    entry's base image: its torch and CUDA libraries are that image's layers, not installed a second time."""
    row = yaml.safe_load(NGC_COMPAT.read_text())["ngc"][0]
    script("make-ngc-shaped-base.sh", row["image"], cuda_build.tags["base"], row["release"], timeout=900)
    yield row["image"]
    with contextlib.suppress(docker.errors.NotFound):
        api.remove_image(row["image"], force=True)


@pytest.fixture(scope="module")
def ngc_build(api: docker.APIClient, ngc_base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EntryBuild]:
    """The ngc flavor with BuildKit, as the release workflow builds every entry."""
    spec = entry_spec_with(NGC_MATRIX, NGC_COMPAT)
    yield from removed_at_the_end(api, lambda: build_entry(
        spec, tmp_path_factory.mktemp("ngc-build"), *from_pypi(), "--builder", "buildkit", matrix_file=NGC_MATRIX,
        env=ngc_env()))


@pytest.fixture(scope="module")
def ngc_classic_build(api: docker.APIClient, ngc_build: EntryBuild,
                      tmp_path_factory: pytest.TempPathFactory) -> Iterator[EntryBuild]:
    """The ngc entry again, by the classic builder under a release of its own (only with --compare-builders)."""
    options = tuple(o for o in ngc_build.options if o not in ("--builder", "buildkit"))
    yield from removed_at_the_end(api, lambda: build_entry(ngc_build.spec, tmp_path_factory.mktemp("ngc-classic"), *options,
                                                   matrix_file=ngc_build.matrix, env=ngc_build.env,
                                                   release=f"{RELEASE}-classic"))


def entry_spec_with(matrix_file: Path, extra_compat: Path) -> specs.ImageSpec:
    """The only entry of `matrix_file`, resolved with the extra compat rows."""
    return specs.resolve(matrix.load(matrix_file), compat.load_with(extra_compat)).specs[0]


@pytest.fixture(scope="module")
def ngc_smoke(ngc_build: EntryBuild, tmp_path_factory: pytest.TempPathFactory) -> tuple[object, dict]:
    return smoke_test(ngc_build, tmp_path_factory.mktemp("ngc-smoke"))


# --- a private registry: Debian's docker-registry with htpasswd and TLS on 127.0.0.1 -----------------

@dataclass(frozen=True)
class Registry:
    host: str
    user: str
    password: str
    folder: Path

    @property
    def pid(self) -> int:
        return int((self.folder / "registry.pid").read_text())

    def catalog(self) -> list[str]:
        response = requests.get(f"https://{self.host}/v2/_catalog", auth=(self.user, self.password),
                                verify=str(self.folder / "ca.crt"), timeout=10)
        return response.json()["repositories"]


def start_registry(folder: Path) -> Registry:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    password = secrets.token_hex(12)
    result = subprocess.run(["bash", str(ROOT / "scripts" / "start-registry.sh"), str(folder), str(port), "ci"],
                            input=password + "\n", capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return Registry(f"127.0.0.1:{port}", "ci", password, folder)


@pytest.fixture(scope="session")
def registry(api: docker.APIClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """The session's registry: each test pushes to a repository of its own, so a layer is stored once and pushed to
    the next repository by a cross-repository mount. Tests that stop or kill a registry start their own."""
    running = start_registry(tmp_path_factory.mktemp("registry"))
    yield running
    os.kill(running.pid, signal.SIGTERM)


# --- clean up as we go: what a module made goes when it ends (tests/session/engines.py) -----------------------------


def kept(make: Callable[[], EntryBuild]) -> EntryBuild:
    """A build of the session that later modules use: it stays when the module that made it ends."""
    return engines.kept(make, lambda build: list(build.tags.values()))


@pytest.fixture(scope="module", autouse=True)
def module_cleaned_up(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module's containers, tags, images and BuildKit cache go when it ends; a heavy one runs alone among heavy
    modules (its lock): the disk's peak is then its largest module's, not the sum of them."""
    with engines.module_cleaned_up(heavy=request.node.get_closest_marker("heavy") is not None):
        yield


# A one-entry CPU matrix, for the tests that render, fail or build it on their own.
CPU_MATRIX = """\
registry: registry.example.com/ml/failures
images:
  - flavor: cpu
    name: {name}
    torch: "2.13.0"
    python: "3.11"
{extra}"""


def render_cpu_entry(tmp_path: Path, name: str, extra: str = "") -> tuple[Path, Path]:
    """A one-entry CPU matrix (NAME, EXTRA lines in its entry) rendered into TMP_PATH/images: (matrix, images)."""
    matrix_file = tmp_path / "matrix.yaml"
    matrix_file.write_text(CPU_MATRIX.format(name=name, extra=extra))
    images = tmp_path / "images"
    result = build_py("render", "--matrix", str(matrix_file), "--tag", "fail", "--out", str(images))
    assert result.returncode == 0, result.stderr
    return matrix_file, images


CANDIDATE = "rc.7"  # the candidate the promote and cache tests push


def as_release_user(*args: str, registry: Registry, cwd: Path) -> subprocess.CompletedProcess[str]:
    """build.py as the registry's user, its password in the environment."""
    env = dict(os.environ, TORCHIMAGES_REGISTRY_PASSWORD=registry.password)
    return build_py(*args, "--registry-user", registry.user, cwd=cwd, env=env, timeout=900)


def push_candidates(registry: Registry, tested_report: Path, folder: Path, repository: str) -> Path:
    report = folder / "report.json"
    report.write_text(tested_report.read_text())
    result = as_release_user("push", "--tag", RELEASE, "--report", str(report), "--registry", f"{registry.host}/{repository}",
                      "--candidate", CANDIDATE, "--manifest", str(folder / "candidates.json"), "--plain",
                      registry=registry, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return folder / "candidates.json"
