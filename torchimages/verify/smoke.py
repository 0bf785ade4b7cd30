"""The smoke stage: start each image as users run it and put it through the testinfra suite.

The suite (tests/smoke) is not baked into the images: its probe scripts are copied into the
running container, pytest drives testinfra's docker backend against it, and the container is
removed afterwards, also on failure or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..containers import Containers, free_port
from ..engine import ENGINE_ERRORS, Engine
from ..input.grammar import DEFAULT_PLATFORM
from ..input.specs import ImageSpec
from ..report import SmokeStage
from ..settings import SETTINGS
from .junit import pytest_checks
from .suite import NO_GPU, SMOKE_DIR, pytest_options

PROBES_IN_CONTAINER = "/tmp/torchimages-probes"
SUITES = {
    "base": ("test_versions.py", "test_hygiene.py", "test_gpu_ready.py", "test_compute.py", "test_gpu.py"),
    "jupyter": ("test_versions.py", "test_hygiene.py", "test_jupyter.py"),
    "ssh": ("test_versions.py", "test_hygiene.py", "test_ssh.py"),
    # the GPU-ready tier again: the compiler must add no second copy of a CUDA library
    "devel": ("test_versions.py", "test_hygiene.py", "test_gpu_ready.py", "test_devel.py"),
}
# Above the sum of the checks' own timeouts (each command in a container runs under `timeout`); past it pytest is
# interrupted, and what ran until then is still reported (run_pytest).
SUITE_TIMEOUT = 3600
INTERRUPT_GRACE = 60
TIERS = {"gpu-ready": "proven without a GPU", "needs-gpu": "needs a GPU"}  # set by tests/smoke/conftest.py
# How long a service may take to answer after its container starts. An image of another platform runs under its
# emulator, where every process the start runs (the entrypoint's doctor, ssh-keygen of the host keys) is about ten
# times slower and the four servers of a suite start at once: there the waits, and the suite's own limits (the
# facts' `patience`), stretch by EMULATED_PATIENCE. An arm64 sshd missed 30 s, and `import torch` over ssh 60 s, on
# two cores busy with other work.
SERVICE_WAIT_S = {"jupyter": 90.0, "ssh": 30.0}
EMULATED_PATIENCE = 6


@dataclass(frozen=True)
class JupyterForm:
    """One way users start Jupyter: the command typed after the image name (None: the image's default)."""

    name: str
    command: list[str] | None
    user: str | None = None
    generated_token: bool = False


JUPYTER_FORMS = (
    JupyterForm("default", None),
    JupyterForm("jupyter-lab", ["jupyter", "lab"]),
    JupyterForm("jupyter-notebook", ["jupyter", "notebook"]),
    JupyterForm("jupyter-server", ["jupyter", "server"]),
    JupyterForm("generated-token", ["jupyter", "lab"], generated_token=True),
    JupyterForm("user-4242", ["jupyter", "lab"], user="4242:4242"),
)


# A container variable a user may well set (a path with a quote, a '$'): ssh sessions must see it unchanged.
QUOTING_PROBE = "it's $HOME and `id`; x"


@dataclass(frozen=True)
class SshForm:
    """One way users start sshd: the command after the image name (None: the default) and how the key arrives."""

    name: str
    command: list[str] | None
    mounted_key: bool = False  # -v KEY.pub:~/.ssh/authorized_keys:ro instead of SSH_AUTHORIZED_KEYS


SSH_FORMS = (
    SshForm("default", None),
    SshForm("sshd", ["sshd"]),
    SshForm("usr-sbin-sshd", ["/usr/sbin/sshd", "-D"]),
    SshForm("mounted-key", None, mounted_key=True),
)


@dataclass
class Check:
    name: str
    outcome: str  # passed, failed, skipped
    message: str = ""
    tier: str = ""  # a key of TIERS, or "" for the other checks


@dataclass
class SmokeResult:
    image: str
    tag: str
    seconds: float = 0.0
    gpus: int = 0
    checks: list[Check] = field(default_factory=list)
    error: str | None = None
    image_id: str | None = None  # the image the suite ran: publish pushes this one, not whatever the tag holds later

    def count(self, outcome: str) -> int:
        return sum(1 for check in self.checks if check.outcome == outcome)

    @property
    def skipped_no_gpu(self) -> int:
        return sum(1 for check in self.checks if check.outcome == "skipped" and NO_GPU in check.message)

    @property
    def ok(self) -> bool:
        return self.error is None and self.count("failed") == 0 and self.count("passed") > 0

    def summary(self) -> str:
        return (f"{self.count('passed')} passed, {self.count('failed')} failed, {self.count('skipped')} skipped "
                f"({self.skipped_no_gpu} for lack of a GPU) in {self.seconds:.1f} s")

    def tiers(self) -> dict[str, dict[str, int]]:
        """Per tier, the checks passed, failed and skipped: what was proven without a GPU and what needs one."""
        return {tier: {outcome: sum(1 for c in self.checks if c.tier == tier and c.outcome == outcome)
                       for outcome in ("passed", "failed", "skipped")} for tier in TIERS}

    def tiers_summary(self) -> str:
        return "; ".join(f"{TIERS[tier]}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
                         for tier, counts in self.tiers().items() if any(counts.values()))

    def record(self) -> SmokeStage:
        return SmokeStage(passed=self.count("passed"), failed=self.count("failed"), skipped=self.count("skipped"),
                          skipped_no_gpu=self.skipped_no_gpu, seconds=round(self.seconds, 1), gpus=self.gpus,
                          tiers=self.tiers(), error=self.error, image_id=self.image_id,
                          checks=[asdict(c) for c in self.checks])


@dataclass(frozen=True)
class Target:
    """One image to test and what it must hold."""

    image: str
    tag: str
    variant: str
    flavor: str
    expected: dict[str, Any]
    entry: str = ""  # the matrix entry (the base image's name); "" for images tested outside a matrix
    platform: str = DEFAULT_PLATFORM
    runs_on: dict[str, str] | None = None  # what a host needs to run it (specs.ImageSpec.runs_on)

    @classmethod
    def of(cls, spec: ImageSpec, variant: str, tag: str, platform: str = DEFAULT_PLATFORM) -> Target:
        """The image of `spec`'s `variant` for `platform` built as `tag`, checked against what the matrix declares."""
        return cls(image=spec.platform_image(variant, platform).image, tag=tag, variant=variant, flavor=spec.flavor,
                   expected=expected_of(spec, platform), entry=spec.name, platform=platform,
                   runs_on=spec.runs_on(platform))


def expected_of(spec: ImageSpec, platform: str = DEFAULT_PLATFORM) -> dict[str, Any]:
    """What the suite checks an image of `spec` for `platform` against: its declared versions, the GPU generations
    claimed for that platform's wheel, and the platform."""
    return {**spec.versions(), "archs": list(spec.archs_for(platform)), "gpu_archs": spec.gpu_archs(platform),
            "platform": platform}


class SmokeRunner:
    def __init__(self, *, require_gpu: bool = False, label_prefix: str = SETTINGS.label_prefix,
                 engine: Engine | None = None) -> None:
        self.engine = engine or Engine()
        self.require_gpu = require_gpu
        self.label_prefix = label_prefix
        self.containers = Containers(self.engine)  # one per runner: an engine's refusal of GPUs is remembered

    def twin(self) -> SmokeRunner:
        """A runner with this one's settings and what it learned of the engine, for a suite run beside its own (each
        runner tracks and removes the containers it started)."""
        other = SmokeRunner(require_gpu=self.require_gpu, label_prefix=self.label_prefix, engine=self.engine)
        other.containers.shm_size = self.containers.shm_size
        other.containers.gpu_request, other.containers.gpu_note = self.containers.gpu_request, self.containers.gpu_note
        return other

    def run(self, target: Target) -> SmokeResult:
        started = time.monotonic()
        result = SmokeResult(target.image, target.tag)
        try:
            with tempfile.TemporaryDirectory(prefix="smoke-") as tmp:
                result.image_id = self.engine.image_id(target.tag)
                if result.image_id is None:
                    raise RuntimeError(f"no image {target.tag} on this engine")
                # Every container runs the image by ID, so a tag moved meanwhile cannot change what was tested.
                facts = self._start(replace(target, tag=result.image_id), Path(tmp))
                facts["image"] = target.tag
                result.gpus = facts["gpus"]
                result.checks = self._pytest(target, facts, self.containers.started[0], Path(tmp))
        except (*ENGINE_ERRORS, RuntimeError, subprocess.TimeoutExpired) as exc:
            result.error = f"{target.image}: could not run the suite: {exc}"
        finally:
            self.containers.remove_all()
            result.seconds = time.monotonic() - started
        return result

    # --- containers --------------------------------------------------------------------------

    def _start(self, target: Target, tmp: Path) -> dict[str, Any]:
        """Start the image's containers (the first started is the one the suite runs in) and gather its facts."""
        config = self.engine.image_config(target.tag)
        facts: dict[str, Any] = {
            "image": target.tag, "variant": target.variant, "flavor": target.flavor, "expected": target.expected,
            "labels": config.get("Labels") or {}, "user": config.get("User") or "",
            "label_prefix": self.label_prefix, "require_gpu": self.require_gpu, "probes": PROBES_IN_CONTAINER,
            # an image of another platform than the engine's runs under its emulator (scripts/setup-emulation.sh)
            "emulated": target.expected.get("platform", DEFAULT_PLATFORM) != self.engine.platform(),
            "jupyter": None, "ssh": None,
        }
        facts["patience"] = EMULATED_PATIENCE if facts["emulated"] else 1
        if target.variant == "jupyter":
            facts["jupyter"] = self._start_jupyter(target, tmp, SERVICE_WAIT_S["jupyter"] * facts["patience"])
        elif target.variant == "ssh":
            facts["ssh"] = self._start_ssh(target, tmp, SERVICE_WAIT_S["ssh"] * facts["patience"])
        else:
            self.containers.start(target.tag, command=["sleep", "infinity"])
        first = self.containers.started[0]
        self.containers.upload(first, sorted((SMOKE_DIR / "probes").glob("*.py")), "torchimages-probes")
        facts["gpus"], facts["gpu_error"] = self.containers.gpus(first)
        facts["gpu_note"] = self.containers.gpu_note
        return facts

    def _start_jupyter(self, target: Target, tmp: Path, wait_s: float) -> dict[str, Any]:
        """One server per way users start it; each must serve the same way."""
        servers = {}
        mount = tmp / "shared"
        mount.mkdir(mode=0o777)
        mount.chmod(0o777)
        for form in JUPYTER_FORMS:
            token, port = secrets.token_hex(16), free_port()
            binds = {str(mount): {"bind": "/workspace/shared", "mode": "rw"}} if form.user else None
            container = self.containers.start(target.tag, command=form.command, port=port, container_port=8888,
                                              environment=None if form.generated_token else {"JUPYTER_TOKEN": token},
                                              user=form.user, binds=binds)
            servers[form.name] = {"url": f"http://127.0.0.1:{port}", "token": token, "container": container,
                                  "command": form.command, "uid": None, "mount": "/workspace/shared" if binds else None}
        for name, server in servers.items():
            try:
                wait_http(f"{server['url']}/api", wait_s, self.containers, server["container"])
            except RuntimeError as exc:
                raise RuntimeError(f"Jupyter started with {name} ({server['command'] or 'no command'}): {exc}") from None
            server["uid"] = int(self.containers.exec(server["container"], ["id", "-u"]).strip())
            server["log"] = self.containers.logs(server["container"], tail=200)
        generated = servers["generated-token"]
        generated["token"] = generated_token(generated["log"])
        return servers

    def _start_ssh(self, target: Target, tmp: Path, wait_s: float) -> dict[str, Any]:
        """One sshd per way users start it, each with a key given at run time."""
        key = tmp / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=30)
        servers = {}
        public = key.with_suffix(".pub")
        public.chmod(0o644)
        home = self.image_home(target.tag) if any(form.mounted_key for form in SSH_FORMS) else ""
        for form in SSH_FORMS:
            port = free_port()
            mounted = {str(public): {"bind": f"{home}/.ssh/authorized_keys", "mode": "ro"}} if form.mounted_key else None
            environment = {"NCCL_SMOKE_QUOTING": QUOTING_PROBE}  # must reach sessions as it is
            if not form.mounted_key:
                environment["SSH_AUTHORIZED_KEYS"] = public.read_text()
            container = self.containers.start(target.tag, command=form.command, port=port, container_port=22,
                                              environment=environment, binds=mounted)
            servers[form.name] = {"port": port, "key": str(key), "container": container, "command": form.command,
                                  "mounted_key": form.mounted_key}
        for name, server in servers.items():
            try:
                wait_ssh(server["port"], wait_s, self.containers, server["container"])
            except RuntimeError as exc:
                raise RuntimeError(f"sshd started with {name} ({server['command'] or 'no command'}): {exc}") from None
            server["user"] = self.containers.exec(server["container"], ["id", "-un"]).strip()
            server["python"] = self.containers.exec(server["container"], ["sh", "-c", "command -v python"]).strip()
        return servers

    def image_home(self, tag: str) -> str:
        """The home folder of the image's user, where a mounted authorized_keys goes."""
        _code, home = self.containers.run_once(tag, entrypoint=["sh", "-c", 'getent passwd "$(id -u)" | cut -d: -f6'],
                                               timeout=60, stderr=False)
        return home.strip()

    # --- pytest ------------------------------------------------------------------------------

    def _pytest(self, target: Target, facts: dict[str, Any], container: str, tmp: Path) -> list[Check]:
        facts_file, junit = tmp / "facts.json", tmp / "junit.xml"
        facts_file.write_text(json.dumps(facts))
        arguments = [*(str(SMOKE_DIR / name) for name in SUITES[target.variant]),
                     f"--hosts=docker://{container}", f"--facts={facts_file}", f"--junitxml={junit}",
                     *pytest_options(), "-v", "-o", "junit_family=xunit2"]
        return run_pytest(arguments, junit, budget=SUITE_TIMEOUT, cwd=SETTINGS.root)


# pytest with Ctrl-C's handler whatever it inherits: the budget interrupts it with SIGINT, and a process started with
# SIGINT ignored (a script's background job, `build.py ... &`) passes that on, so pytest would run on and its results
# be lost (measured here: a hanging suite then ended with no results at all).
PYTEST = ("import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
          "sys.exit(pytest.main(sys.argv[1:]))")


def run_pytest(arguments: list[str], junit: Path, *, budget: float, cwd: Path,
               grace: float = INTERRUPT_GRACE) -> list[Check]:
    """Run pytest with `arguments`; past `budget` seconds interrupt it as Ctrl-C would, so its JUnit file still holds
    what ran."""
    process = subprocess.Popen([sys.executable, "-c", PYTEST, *arguments], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=cwd)
    overran = False
    try:
        output, _ = process.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        overran = True
        process.send_signal(signal.SIGINT)
        try:
            output, _ = process.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
    if not junit.exists():
        raise RuntimeError(f"pytest did not run (exit {process.returncode}{', interrupted' if overran else ''}):\n"
                           f"{output[-3000:]}")
    checks = parse_junit(junit)
    if overran:
        checks.append(Check("suite::budget", "failed", f"the suite ran past its {budget:.0f} s budget and was "
                            f"interrupted; the check running then has no result. Its output ends:\n{output[-1500:]}"))
    return checks


def parse_junit(path: Path) -> list[Check]:
    """The checks of pytest's junit file; one that cannot be read (a suite killed while writing it) is the suite's
    error (RuntimeError, which the runner records as the image's result)."""
    return [Check(**check) for check in pytest_checks(path)]


def wait_http(url: str, timeout: float, containers: Containers, container: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(urllib.error.URLError, ConnectionError, OSError), urllib.request.urlopen(url, timeout=5):
            return
        containers.check_running(container)
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f} s; container log:\n{containers.logs(container)}")


def wait_ssh(port: int, timeout: float, containers: Containers, container: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            if sock.recv(64).startswith(b"SSH-"):
                return
        containers.check_running(container)
        time.sleep(0.3)
    raise RuntimeError(f"sshd on port {port} did not answer within {timeout:.0f} s; container log:\n"
                       f"{containers.logs(container)}")


def generated_token(log: str) -> str | None:
    """The token the image generated and printed when JUPYTER_TOKEN was not set."""
    found = re.findall(r"JupyterLab token \(generated[^)]*\): ([0-9a-f]+)", log)
    return found[0] if found else None
