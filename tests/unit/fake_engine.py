"""The one stand-in for the Docker engine in the unit tests: the SDK calls this project makes outside a build
(torchimages.containers: create, start, exec, wait, logs, remove; the image queries), answered as an engine answers
them, from what each test sets. The real engine's answers are checked in tests/integration."""

from __future__ import annotations

from typing import Any

import docker.errors
import requests

from torchimages.engine import Engine

# What this machine's engine answers a GPU request when no NVIDIA container toolkit is installed
REFUSED = 'could not select device driver "" with capabilities: [[gpu]]'
ONE_GPU = b"GPU 0: NVIDIA H200 (UUID: GPU-1)\n"


class FakeEngine:
    """`api` of an engine: every container it creates is recorded (its host config and command); an exec answers
    `smi` (exit code, stdout) with `stderr`; a container run to its end answers `runs[command]`; `images` answers
    inspect_image. `refuse_gpus`: starting a container that asks for GPUs fails as on an engine without the toolkit."""

    def __init__(self, *, refuse_gpus: bool = True, smi: tuple[int, bytes] = (0, ONE_GPU),
                 images: dict[str, dict[str, Any]] | None = None,
                 runs: dict[str, tuple[int, bytes]] | None = None, arch: str = "amd64", version: str = "20.10.24",
                 driver_status: list[list[str]] | None = None, saved: dict[str, bytes] | None = None) -> None:
        self.refuse_gpus, self.smi, self.stderr, self.arch, self.engine_version = refuse_gpus, smi, b"", arch, version
        self.images, self.runs = images or {}, runs or {}
        # `docker info`'s DriverStatus (the classic store's overlay2 unless given), and what `docker save` streams
        self.driver_status = driver_status or [["Backing Filesystem", "extfs"], ["Supports d_type", "true"]]
        self.saved = saved or {}
        self.created: list[dict[str, Any]] = []  # each container's host config
        self.commands: dict[str, str] = {}  # container -> the command it runs
        self.removed: list[str] = []

    @property
    def engine(self) -> Engine:
        """The seam every stage talks through (torchimages.engine), over this stand-in."""
        return Engine(api=self)  # type: ignore[arg-type]

    def version(self) -> dict[str, str]:
        return {"Os": "linux", "Arch": self.arch, "Version": self.engine_version}

    def info(self) -> dict[str, Any]:
        return {"DriverStatus": self.driver_status}

    def get_image(self, image: str, chunk_size: int = 2 * 1024 * 1024) -> Any:
        data = self.saved[image]
        return (data[start:start + chunk_size] for start in range(0, len(data), chunk_size))

    def inspect_image(self, tag: str) -> dict[str, Any]:
        if tag not in self.images:
            response = requests.Response()
            response.status_code = 404
            raise docker.errors.ImageNotFound(f"No such image: {tag}", response=response)
        return self.images[tag]

    def create_host_config(self, **options: Any) -> dict[str, Any]:
        return options

    def create_container(self, image: str, command: Any = None, **options: Any) -> dict[str, str]:
        self.created.append(options.get("host_config") or {})
        container = f"c{len(self.created)}"
        self.commands[container] = " ".join(command) if isinstance(command, list) else str(command or "")
        return {"Id": container}

    def start(self, container: str) -> None:
        if self.refuse_gpus and self.created[int(container[1:]) - 1].get("device_requests"):
            response = requests.Response()
            response.status_code = 500
            raise docker.errors.APIError("500 Server Error", response=response, explanation=REFUSED)

    def wait(self, container: str, timeout: int | None = None) -> dict[str, int]:
        return {"StatusCode": self.runs.get(self.commands[container], (0, b""))[0]}

    def logs(self, container: str, stderr: bool = True, **_options: Any) -> bytes:
        return self.runs.get(self.commands[container], (0, b""))[1]

    def remove_container(self, container: str, force: bool = False) -> None:
        self.removed.append(container)

    def exec_create(self, container: str, command: list[str]) -> str:
        return "exec"

    def exec_start(self, exec_id: str, demux: bool = False) -> bytes | tuple[bytes | None, bytes | None]:
        return (self.smi[1], self.stderr) if demux else self.smi[1] + self.stderr

    def put_archive(self, container: str, path: str, data: bytes) -> bool:
        return True

    def exec_inspect(self, exec_id: str) -> dict[str, int]:
        return {"ExitCode": self.smi[0]}
