"""Containers started as users run images, tracked so each one is removed: for the smoke suite, the bench and tests.

Like docker-stacks' TrackedContainer: start (as `docker run --gpus all --shm-size 2g` would), exec with a
timeout, copy files in, wait, read logs, and remove everything started, also on failure or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import io
import socket
import tarfile
import threading
from pathlib import Path
from types import TracebackType

import docker
import docker.errors
import docker.types

from .engine import Engine

SHM_SIZE = "2g"  # DataLoader workers and NCCL pass tensors through /dev/shm (64 MB by default)
LABEL = {"io.torchimages.smoke": "1"}  # every container this tool starts carries it


class Containers:
    """The containers one runner starts; `with Containers(engine) as containers:` removes them at the end."""

    def __init__(self, engine: Engine, *, shm_size: str | None = SHM_SIZE) -> None:
        self.engine = engine
        self.shm_size = shm_size  # None: Docker's default 64 MB, as a user who forgets --shm-size gets
        # Every container asks for all GPUs, as `docker run --gpus all` does (the NVIDIA container toolkit needs no
        # `nvidia` runtime in `docker info`); an engine that refuses the request is remembered, and asked no more.
        self.gpu_request: bool | None = None
        self.gpu_note = ""
        self.started: list[str] = []

    @property
    def api(self) -> docker.APIClient:
        return self.engine.api  # the calling thread's connection

    def __enter__(self) -> Containers:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.remove_all()

    def start(self, image: str, *, command: list[str] | None = None, environment: dict[str, str] | None = None,
              port: int | None = None, container_port: int | None = None, user: str | None = None,
              binds: dict[str, dict[str, str]] | None = None) -> str:
        """Create and start a container as `docker run --gpus all` would; without GPUs where the engine has none."""
        def create(gpus: bool) -> str:
            host_config = self.api.create_host_config(
                shm_size=self.shm_size, binds=binds,
                port_bindings={container_port: ("127.0.0.1", port)} if port else None,
                device_requests=[docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if gpus else None,
            )
            container = self.api.create_container(image, command=command, environment=environment, user=user,
                                                  ports=[container_port] if container_port else None,
                                                  host_config=host_config, labels=LABEL)["Id"]
            self.started.append(container)
            return container

        count = len(self.started)
        try:
            container = create(gpus=self.gpu_request is not False)
            self.api.start(container)
        except docker.errors.APIError as exc:
            if self.gpu_request is not None or not refuses_gpus(exc):
                raise
            self.gpu_request = False
            self.gpu_note = f"the engine refused a GPU request ({str(exc).strip()[:200]}): no NVIDIA container toolkit"
            for refused in self.started[count:]:
                self.remove(refused)
            container = create(gpus=False)
            self.api.start(container)
        else:
            self.gpu_request = self.gpu_request is not False
        return container

    def run_once(self, image: str, *, command: list[str] | None = None, entrypoint: list[str] | None = None,
                 timeout: int = 300, stderr: bool = True, user: str | None = None) -> tuple[int, str]:
        """Run a command to its end in a fresh container (no GPU request): its exit code and output."""
        container = self.api.create_container(image, command=command, entrypoint=entrypoint, labels=LABEL,
                                              user=user)["Id"]
        try:
            self.api.start(container)
            code = self.api.wait(container, timeout=timeout)["StatusCode"]
            return code, self.api.logs(container, stderr=stderr).decode(errors="replace")
        finally:
            with contextlib.suppress(docker.errors.APIError):
                self.api.remove_container(container, force=True)

    def exec(self, container: str, command: list[str], timeout: int = 60) -> str:
        """stdout and stderr of `command` under `timeout`; RuntimeError when it fails."""
        code, stdout, stderr = self.exec_split(container, command, timeout)
        if code != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {(stdout + stderr)[-500:]}")
        return stdout + stderr

    def exec_split(self, container: str, command: list[str], timeout: int = 60) -> tuple[int, str, str]:
        """Exit code, stdout and stderr apart (a result printed on stdout is never mixed with warnings)."""
        exec_id = self.api.exec_create(container, ["timeout", str(timeout), *command])
        stdout, stderr = self.api.exec_start(exec_id, demux=True)
        code = self.api.exec_inspect(exec_id)["ExitCode"]
        return code, (stdout or b"").decode(errors="replace"), (stderr or b"").decode(errors="replace")

    def upload(self, container: str, files: list[Path], folder: str) -> None:
        """Copy `files` into /tmp/FOLDER in the container, readable by any user."""
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            for path in files:  # a link (probes/gpurules.py) goes in as the file it names
                info = tar.gettarinfo(str(path.resolve()), arcname=f"{folder}/{path.name}")
                info.uid = info.gid = 0
                info.mode = 0o644
                with path.resolve().open("rb") as handle:
                    tar.addfile(info, handle)
        self.api.put_archive(container, "/tmp", archive.getvalue())

    def gpus(self, container: str) -> tuple[int, str | None]:
        """The GPUs the container was given (nvidia-smi -L), and nvidia-smi's error when it fails: an error, not 0 GPUs."""
        if not self.gpu_request:
            return 0, None
        try:
            listing = self.exec(container, ["nvidia-smi", "-L"])
        except RuntimeError as exc:
            return 0, f"GPUs were requested, but nvidia-smi failed in the container: {exc}"
        return sum(1 for line in listing.splitlines() if line.startswith("GPU ")), None

    def logs(self, container: str, tail: int = 30) -> str:
        return self.api.logs(container, tail=tail).decode(errors="replace")

    def check_running(self, container: str) -> None:
        """Fail at once when a service's container has stopped, instead of waiting out a timeout."""
        state = self.api.inspect_container(container)["State"]
        if not state["Running"]:
            raise RuntimeError(f"the container exited with code {state['ExitCode']}; its log:\n{self.logs(container)}")

    def remove(self, container: str) -> None:
        with contextlib.suppress(docker.errors.APIError):  # already gone
            self.api.remove_container(container, force=True)
        if container in self.started:
            self.started.remove(container)

    def remove_all(self) -> None:
        for container in list(self.started):
            self.remove(container)


def refuses_gpus(exc: docker.errors.APIError) -> bool:
    """The engine's answer to a GPU request when no NVIDIA container toolkit is installed."""
    return "could not select device driver" in str(exc)


_HANDED_OUT: set[int] = set()
_PORTS = threading.Lock()


def free_port() -> int:
    """A free port on 127.0.0.1, never one handed out before in this process: suites run side by side (--jobs) each
    publish their servers' ports, and the port a closed probe socket gave back may come round again."""
    with _PORTS:
        while True:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
