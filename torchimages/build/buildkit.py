"""The BuildKit backend: the docker CLI that comes with the engine builds, its plain progress parsed into build events.

The Docker SDK drives only the classic builder (docker/docker-py#2230), so BuildKit is reached through a docker CLI
that can use it: one with the buildx plugin (`docker buildx build --load`), or a client older than 23.0, whose own
`docker build` uses the daemon's BuildKit when DOCKER_BUILDKIT=1 (Debian's docker.io 20.10). Newer clients without
buildx refuse DOCKER_BUILDKIT=1. Build arguments are handed over by name (`--build-arg NAME`, the value in the CLI's
environment), so an index token never shows on a command line.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import signal
import subprocess
import tempfile
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from ..engine import CONTAINERD_STORE, BuildOutcome, Engine, engine_address
from ..errors import UserError, visible
from ..events import EventSink, StageEvent
from ..input.grammar import digest_problem
from .cache import without_credentials
from .render import BUILDKIT_DOCKERFILE

STEP = re.compile(r"^#\d+ \[(?:(?P<stage>\S+) )?(?P<step>\d+)/(?P<steps>\d+)\] (?P<text>.*)$")
OUTPUT = re.compile(r"^#(?P<vertex>\d+) \d+\.\d+ (?P<text>.*)$")
VERTEX_ERROR = re.compile(r"^#(?P<vertex>\d+) ERROR: (?P<text>.*)$")
VERTEX_NAME = re.compile(r"^#(?P<vertex>\d+) \[(?P<name>[^\]]+)\] (?P<text>.*)$")
QUIET = re.compile(r"^#\d+ (sha256:[0-9a-f]+|DONE [0-9.]+s|CACHED)$")  # bookkeeping, not worth a log line
# What Dockerfile.buildkit reads from the build-env secret (macros.build_args); the rest stay build arguments.
SECRET_ARGUMENTS = frozenset({"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "TORCH_INDEX_URL", "OFFLINE"})
MODERN_CLIENT = 23  # from 23.0 the CLI builds with BuildKit only through buildx
# --compression zstd: the image exporter into the engine's store, every layer (the base's too) compressed with zstd as it
# is exported, under OCI media types (Docker's have no zstd layer); the containerd store keeps those blobs, and the push
# sends them as they are.
ZSTD_OUTPUT = "type=image,compression=zstd,force-compression=true,oci-mediatypes=true"
# A buildx builder instance's name as `docker buildx create --name` accepts it (and a docker context's name): never
# an option, never a path.
BUILDX_BUILDER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class BuildKitCli:
    """A docker CLI that can build with BuildKit, and how."""

    path: str
    version: str
    buildx: bool

    def command(self, selects: list[str] | None = None, output: str | None = None) -> list[str]:
        """The build command; `selects`: the options that name a buildx builder (check_instance), buildx only;
        `output`: buildx's --output for the engine's image store (ZSTD_OUTPUT), else --load."""
        if not self.buildx:
            return [self.path, "build"]
        context = selects if selects and selects[0] == "--context" else []
        builder = selects if selects and selects[0] == "--builder" else []
        # No attestations of buildx's own: on the containerd store they make the image an index (an `unknown/unknown`
        # attestation manifest beside the image's), which the release's index would nest; the tool attaches its own
        # provenance and SBOM to what it pushes (torchimages.publish.attest).
        loaded = [f"--output={output}"] if output else ["--load"]
        return [self.path, *context, "buildx", "build", *builder, *loaded, "--provenance=false", "--sbom=false"]

    def describe(self) -> str:
        return f"{self.path} {self.version} ({'buildx' if self.buildx else 'DOCKER_BUILDKIT=1'})"


def docker_clis(search: str | None = None) -> list[str]:
    """Every docker executable on `search` (default PATH, then Debian's /usr/bin); each once."""
    found: dict[str, str] = {}
    folders = (search if search is not None else os.environ.get("PATH", "") + os.pathsep + "/usr/bin").split(os.pathsep)
    for folder in folders:
        path = Path(folder or ".") / "docker"
        if path.is_file() and os.access(path, os.X_OK):
            found.setdefault(os.path.realpath(path), str(path))
    return list(found.values())


# What `docker --version` says is the CLI's answer: a major, a dot, then visible version characters (20.10.24+dfsg1).
CLIENT_VERSION = re.compile(r"version ([0-9]+)\.[0-9A-Za-z.+~_-]*", re.ASCII)


def client_version(path: str) -> str | None:
    """`docker --version` -> "20.10.24+dfsg1"; None when it does not answer with a version."""
    try:
        result = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20, check=False,
                                errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = CLIENT_VERSION.search(result.stdout)
    return match.group(0).removeprefix("version ") if match else None


def has_buildx(path: str) -> bool:
    try:
        return subprocess.run([path, "buildx", "version"], capture_output=True, timeout=20, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_cli(search: str | None = None) -> BuildKitCli:
    """The first docker CLI that can build with BuildKit; a UserError naming each one tried otherwise."""
    tried = []
    for path in docker_clis(search):
        version = client_version(path)
        if version is None:
            tried.append(f"{path} (does not answer)")
            continue
        if has_buildx(path):
            return BuildKitCli(path, version, buildx=True)
        if int(version.split(".", 1)[0]) < MODERN_CLIENT:  # client_version: the major is digits
            return BuildKitCli(path, version, buildx=False)
        tried.append(f"{path} {version} (no buildx plugin; from 23.0 only buildx builds with BuildKit)")
    raise UserError("no docker CLI here can build with BuildKit: " + ("; ".join(tried) or "no docker on PATH") +
                    ". Install the buildx plugin (docker-buildx), or Debian's docker.io (its 20.10 client at "
                    "/usr/bin/docker), or build with --builder classic")


def check_instance(cli: BuildKitCli, instance: str) -> list[str]:
    """A named buildx builder must be one buildx knows, before any build starts; a UserError saying why not. Returns
    the CLI's options that select it: a builder of the docker driver builds on its docker context's engine (buildx
    refuses it from any other context), which must be the engine this run inspects; any other driver (remote,
    kubernetes, docker-container) loads the image into DOCKER_HOST's engine."""
    if not BUILDX_BUILDER.match(instance):
        raise UserError(f"--buildx-builder {visible(instance)[:80]!r} is not a builder name (letters, digits, '_', '.', "
                        "'-'; `docker buildx ls` lists them)")
    if not cli.buildx:
        raise UserError(f"--buildx-builder {instance} needs the buildx plugin, and {cli.describe()} has none")
    said = ask(cli, ["buildx", "inspect", instance])
    if said.returncode != 0:
        raise UserError(f"no buildx builder {instance} answers here ({last_line(said)}); `docker buildx ls` lists the "
                        "builders, `docker buildx create` makes one (docs/engines.md)")
    if not re.search(r"^Driver:\s+docker$", said.stdout, re.M):
        return ["--builder", instance]
    endpoint = ask(cli, ["context", "inspect", instance, "--format", "{{.Endpoints.docker.Host}}"])
    host = endpoint.stdout.strip()
    if endpoint.returncode != 0 or host != engine_address():
        raise UserError(f"the buildx builder {instance} (docker driver) builds on the engine of docker context "
                        f"{instance} ({visible(host)[:100] or last_line(endpoint)}), not on this run's "
                        f"{engine_address()}: set DOCKER_HOST to that engine, or name a builder that loads into any "
                        "engine (docker-container, remote, kubernetes drivers)")
    return ["--context", instance]


def ask(cli: BuildKitCli, arguments: list[str]) -> subprocess.CompletedProcess[str]:
    """The CLI's answer to a question about builders or contexts (DOCKER_HOST: this run's engine)."""
    try:
        return subprocess.run([cli.path, *arguments], capture_output=True, text=True, timeout=60, check=False,
                              errors="replace", env={**os.environ, "DOCKER_HOST": engine_address()})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"{cli.path} {' '.join(arguments)} did not answer: {exc}") from None


def last_line(answer: subprocess.CompletedProcess[str]) -> str:
    said = (answer.stderr or answer.stdout).strip().splitlines()
    return visible(said[-1])[:200] if said else f"exit {answer.returncode}"


@dataclass
class StreamState:
    """What a plain progress stream has said so far about one build."""

    outcome: BuildOutcome
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=20))
    names: dict[str, str] = field(default_factory=dict)  # vertex -> "[stage 2/5] RUN ..."
    last_line: str = ""


def handle_line(raw: str, image: str, state: StreamState, emit: EventSink) -> None:
    """One line of `--progress=plain` as build events: steps, their output, the failing step and its error."""
    line = raw.rstrip()
    if not line or line == "------" or QUIET.match(line):
        return
    state.last_line = line
    if match := VERTEX_NAME.match(line):
        state.names[match.group("vertex")] = f"[{match.group('name')}] {match.group('text')}"
    if match := STEP.match(line):
        state.outcome.step = state.names.get(line.split()[0][1:], line)
        # BuildKit numbers the steps of each stage (and may run stages side by side): the stage leads the text
        text = f"{match.group('stage')}: {match.group('text')}" if match.group("stage") else match.group("text")
        emit(StageEvent(image, "step", text, int(match.group("step")), int(match.group("steps"))))
    elif match := VERTEX_ERROR.match(line):
        state.outcome.error = match.group("text")
        state.outcome.step = state.names.get(match.group("vertex"), state.outcome.step)
    elif match := OUTPUT.match(line):
        state.tail.append(match.group("text"))
    emit(StageEvent(image, "log", line))


# Seconds a docker CLI has to cancel its build after SIGINT before its process group is killed.
STOP_GRACE = 20.0


class BuildKitBuilder:
    """Builds through a BuildKit-capable docker CLI; the same outcomes and events as the classic builder."""

    # A build for another platform than the engine's installs torch with the build platform's pip for the target
    # platform (Dockerfile.buildkit's torch-cross stage, TORCH_INSTALL=cross): no emulator unpacks the wheels.
    cross_installs = True
    dockerfile = BUILDKIT_DOCKERFILE

    def __init__(self, engine: Engine, cli: BuildKitCli | None = None, *, stop_grace: float = STOP_GRACE,
                 instance: str | None = None, compression: str = "gzip") -> None:
        self.engine = engine
        self.cli = cli or find_cli()
        self.instance = instance
        self.selects = check_instance(self.cli, instance) if instance is not None else []
        self.output = compressed_output(self.cli, engine, compression)
        if self.output and self.selects[:1] == ["--builder"]:
            raise UserError(f"--compression {compression} with --buildx-builder {instance}: a builder of another driver "
                            "than docker loads the image into this engine as `--load` does, gzip; only a builder of "
                            "this engine (the docker driver) keeps the layers as it compressed them")
        self.stop_grace = stop_grace
        self.running: dict[str, subprocess.Popen[str]] = {}
        self._interrupted: set[int] = set()
        self._lock = threading.Lock()

    def build(self, image: str, context: Path, tag: str, *, buildargs: dict[str, str], emit: EventSink,
              cancel: threading.Event, cache_from: list[str] | None = None,
              labels: dict[str, str] | None = None, platform: str | None = None) -> BuildOutcome:
        """Build `context` into `tag` for `platform` (the engine's own by default); never raises for build errors."""
        state = StreamState(BuildOutcome(image=image, tag=tag))
        with tempfile.TemporaryDirectory(prefix="buildkit-") as tmp:
            iidfile = Path(tmp) / "iid"
            dockerfile = context / BUILDKIT_DOCKERFILE
            if dockerfile.is_file():  # its installing steps read these from a secret, not from build arguments
                buildargs, secret_options = as_secret(buildargs, Path(tmp) / "build-env")
            else:
                dockerfile, secret_options = context / "Dockerfile", []
            command = [*self.cli.command(self.selects, self.output), "--progress=plain", "--file", str(dockerfile), "--tag", tag,
                       "--iidfile", str(iidfile), *(["--no-cache"] if self.engine.no_cache else []), *secret_options,
                       *([f"--platform={platform}"] if platform else []),
                       *[f"--build-arg={name}" for name in sorted(buildargs)],
                       *[f"--label={key}={value}" for key, value in sorted((labels or {}).items())],
                       *[f"--cache-from={ref}" for ref in cache_from or []], str(context)]
            env = {**os.environ, **buildargs, "DOCKER_BUILDKIT": "1", "DOCKER_HOST": engine_address()}
            returncode = self._run(command, env, image, state, emit=emit, cancel=cancel)
            if iidfile.is_file() and returncode == 0:
                written = iidfile.read_text(errors="replace").strip()[:100]
                if digest_problem(written):
                    state.outcome.error = f"the docker CLI wrote {visible(written)!r} as the image ID, not a digest"
                else:
                    state.outcome.image_id = written
        outcome = state.outcome
        outcome.log_tail = list(state.tail)
        if cancel.is_set() and not outcome.image_id:
            outcome.cancelled = True
        elif returncode != 0 and not outcome.error:
            outcome.error = state.last_line or f"the docker CLI exited with {returncode}"
        return outcome

    def _run(self, command: list[str], env: dict[str, str], image: str, state: StreamState, *, emit: EventSink,
             cancel: threading.Event) -> int:
        try:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                       start_new_session=True, errors="replace")
        except OSError as exc:
            state.outcome.error = f"{self.cli.path} could not be run: {exc.strerror}"
            return 1
        with self._lock:
            self.running[image] = process
        try:
            assert process.stdout is not None
            for raw in process.stdout:
                handle_line(raw, image, state, emit)
                if cancel.is_set():
                    self._interrupt(process)
            return process.wait()
        finally:
            with self._lock:
                self.running.pop(image, None)
                self._interrupted.discard(process.pid)

    def describe(self) -> str:
        return f"BuildKit through {self.cli.describe()}" + (f", builder {self.instance}" if self.instance else "")

    def stop_builds(self) -> None:
        """Ctrl-C or SIGTERM: interrupt every running CLI, which cancels its build; no tag is written."""
        with self._lock:
            processes = list(self.running.values())
        for process in processes:
            self._interrupt(process)

    def _interrupt(self, process: subprocess.Popen[str]) -> None:
        """SIGINT to the CLI's process group, as Ctrl-C in a terminal would send it, once; a CLI still running
        `stop_grace` seconds later is killed with its group. A process started in the background by a script
        (`cmd &`, nohup) inherits SIGINT ignored, and such a CLI would otherwise build on and be waited for forever;
        BuildKit cancels a build whose client goes away."""
        with self._lock:
            if process.pid in self._interrupted:
                return
            self._interrupted.add(process.pid)
        signal_group(process, signal.SIGINT)
        threading.Thread(target=kill_after, args=(process, self.stop_grace), name="buildkit-stop", daemon=True).start()


def compressed_output(cli: BuildKitCli, engine: Engine, compression: str) -> str | None:
    """buildx's --output for --compression, or None (--load: gzip, the push's own); a UserError, before any build, where
    the layers would not stay as built: without buildx, or on the classic store, which keeps layers uncompressed and
    gzips them at the push."""
    if compression == "gzip":
        return None
    if not cli.buildx:
        raise UserError(f"--compression {compression} needs the buildx plugin (its image exporter compresses the layers), "
                        f"and {cli.describe()} has none")
    if engine.store() != CONTAINERD_STORE:
        raise UserError(f"--compression {compression} needs an engine with the containerd image store, which keeps the "
                        f"layers as BuildKit compressed them for the push: Docker {engine.version()} here has the "
                        f"{engine.store()} store, whose push gzips every layer (docs/engines.md); build on an engine with "
                        "the containerd image store, or leave --compression out")
    return ZSTD_OUTPUT


def as_secret(buildargs: dict[str, str], path: Path) -> tuple[dict[str, str], list[str]]:
    """Move the network settings pip reads (index URLs and their tokens, OFFLINE) out of the build arguments into a
    secret file network-env.sh sources: a secret is never written to a layer, the history or the cache.

    BuildKit keeps secrets out of its cache keys, so BUILD_ENV, a digest of the moved values without their
    credentials, is passed instead: a step that reads them runs again when they change.
    """
    moved = {name: value for name, value in buildargs.items() if name in SECRET_ARGUMENTS}
    kept = {name: value for name, value in buildargs.items() if name not in SECRET_ARGUMENTS}
    path.touch(mode=0o600)
    path.write_text("".join(f"export {name}={shlex.quote(value)}\n" for name, value in sorted(moved.items())),
                    encoding="utf-8")
    fingerprint = hashlib.sha256()
    for name, value in sorted(moved.items()):
        fingerprint.update(f"{name}={without_credentials(value)}\0".encode())
    kept["BUILD_ENV"] = f"sha256:{fingerprint.hexdigest()}"
    return kept, [f"--secret=id=build-env,src={path}"]


def signal_group(process: subprocess.Popen[str], number: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, number)


def kill_after(process: subprocess.Popen[str], grace: float) -> None:
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        signal_group(process, signal.SIGKILL)
