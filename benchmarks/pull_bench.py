"""The first pull on a fresh GPU node (issue 52): cold pulls through a proxy on loopback that limits each connection's
rate, as a registry behind object storage serves each connection at a bounded rate. Prints numbers; asserts nothing.

    .venv/bin/python benchmarks/pull_bench.py [--rate 50] [--rounds 2] [--pigz] IMAGE [IMAGE ...]
    e.g. ... registry.example.com/ml/pytorch:v2.7-torch2.13.0-cpu-py3.11

Runs as root on a machine with a Docker engine (scripts/start-engine.sh), in one run: each IMAGE this engine holds
(two layouts of one image, say) is pushed once to a private registry started here (distribution, TLS, htpasswd); the
proxy relays TCP to it (TLS passes through untouched), pacing what each connection sends back at --rate MB/s. Then,
round after round, each image in turn is pulled through the proxy by an empty engine (a dockerd of its own with an
empty data root, started for that pull): the pull's time, when its last layer was downloaded, and how long its layers
took to extract, read from the pull's own progress stream. dockerd downloads three layers at once and extracts them one
after another, in order (moby/moby#37957), so the download share is what a layout can shorten and the extract share is
not. With --pigz, each pull runs twice: dockerd with `unpigz` on its PATH (it decompresses gzip layers with it when it
finds it: moby/moby#35697) and without it (MOBY_DISABLE_PIGZ=1); `apt-get install pigz` first.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from cache_bench import empty_engine, registry  # noqa: E402

REPOSITORY = "bench/pull"
MB = 1e6
CHUNK = 256 * 1024
# A connection sleeps once it owes this much: asyncio's sleeps are not finer than about a millisecond, so sleeping
# after each read (often a 16 KB TLS record) would pace it far below its rate.
GRAIN = 0.02


@dataclass
class Pace:
    """What one connection may send: `rate` bytes a second, from when it has something to send (an idle keep-alive
    connection saves up no credit for a burst later)."""

    rate: float
    ready_at: float = 0.0

    def wait_after(self, now: float, size: int) -> float:
        """Seconds to wait after sending `size` bytes at `now` before the connection sends again."""
        self.ready_at = max(self.ready_at, now) + size / self.rate
        return max(0.0, self.ready_at - now)


class PacedProxy:
    """A TCP relay on 127.0.0.1 to `upstream`: each connection's answers paced at `rate` bytes a second, its requests
    not (a pull sends little). Runs its own event loop in a thread."""

    def __init__(self, upstream_port: int, rate: float) -> None:
        self.upstream_port, self.rate = upstream_port, rate
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    async def relay(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, pace: Pace | None) -> None:
        try:
            while chunk := await source.read(CHUNK):
                sink.write(chunk)
                await sink.drain()
                if pace and (owed := pace.wait_after(self.loop.time(), len(chunk))) >= GRAIN:
                    await asyncio.sleep(owed)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            sink.close()

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self.relay(reader, up_writer, None), self.relay(up_reader, writer, Pace(self.rate)))

    def __enter__(self) -> PacedProxy:
        self.thread.start()
        starting = asyncio.start_server(self.connection, "127.0.0.1", 0)
        self.server = asyncio.run_coroutine_threadsafe(starting, self.loop).result(timeout=30)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *_: object) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)


@dataclass
class LayerTimes:
    downloaded: float | None = None  # seconds from the pull's start
    extract_started: float | None = None
    extracted: float | None = None


@dataclass
class Pull:
    image: str
    pigz: bool
    seconds: float = 0.0
    layers: dict[str, LayerTimes] = field(default_factory=dict)

    def read(self, event: dict, at: float) -> None:
        """One line of the pull's progress stream (dockerd 20.10's words), at `at` seconds from its start."""
        layer, status = event.get("id"), event.get("status", "")
        if not layer or status.startswith("Pulling from"):
            return
        times = self.layers.setdefault(layer, LayerTimes())
        if status in ("Download complete", "Already exists"):
            times.downloaded = at
        elif status == "Extracting" and times.extract_started is None:
            times.extract_started = at
        elif status == "Pull complete":
            times.extracted = at

    @property
    def download(self) -> float:
        """When the last layer finished downloading."""
        return max((t.downloaded for t in self.layers.values() if t.downloaded is not None), default=0.0)

    @property
    def extract(self) -> float:
        """The layers' extraction, one after another: the sum of each one's."""
        return sum(t.extracted - t.extract_started for t in self.layers.values()
                   if t.extracted is not None and t.extract_started is not None)


@contextmanager
def trusted(port: int, ca: Path) -> Iterator[None]:
    """dockerd trusts a registry's CA per host:port (certs.d): the proxy's address is another one."""
    folder = Path(f"/etc/docker/certs.d/127.0.0.1:{port}")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ca, folder / "ca.crt")
    try:
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def push(image: str, remote: str, config: Path) -> None:
    subprocess.run(["docker", "tag", image, remote], check=True)
    subprocess.run(["docker", "--config", str(config), "push", remote], check=True, capture_output=True)
    subprocess.run(["docker", "rmi", remote], check=True, capture_output=True)


def cold_pull(remote: str, password: str, folder: Path, pigz: bool) -> Pull:
    pull = Pull(remote, pigz)
    env = None if pigz else dict(os.environ, MOBY_DISABLE_PIGZ="1")
    with empty_engine(folder, env=env) as address:
        started = time.perf_counter()
        for event in docker.APIClient(base_url=address, timeout=3600).pull(
                remote, stream=True, decode=True, auth_config={"username": "bench", "password": password}):
            if "error" in event:
                sys.exit(f"pulling {remote}: {event['error']}")
            pull.read(event, time.perf_counter() - started)
        pull.seconds = time.perf_counter() - started
    shutil.rmtree(folder, ignore_errors=True)
    return pull


def layer_sizes(image: str) -> list[int]:
    """The image's layers as this engine holds them (unpacked), largest first."""
    history = docker.from_env(timeout=600).api.history(image)  # DOCKER_HOST's engine, as the pushes
    return sorted((int(step["Size"]) for step in history if step["Size"]), reverse=True)


def report(pulls: list[Pull], images: dict[str, str], rate: float) -> None:
    """The medians of each image's pulls, with the ratio to the same image without unpigz (`x no unpigz`) and to the
    first IMAGE pulled the same way (`x image 1`: two layouts of one image, today's first, side by side)."""
    print(f"\ncold pulls through the proxy at {rate / MB:.0f} MB/s per connection (median of the rounds)")
    print(f"{'image':<40} {'unpigz':>6} {'layers':>6} {'pull s':>7} {'downloaded by s':>15} {'extract s':>9}"
          f" {'x no unpigz':>11} {'x image 1':>9}")
    baseline: dict[bool, float] = {}  # the first image's pull, per unpigz
    for name, remote in images.items():
        first: float | None = None  # the image's first row: the same image pulled without unpigz
        for pigz in sorted({p.pigz for p in pulls}):
            mine = [p for p in pulls if p.image == remote and p.pigz == pigz]
            seconds = statistics.median(p.seconds for p in mine)
            first = first or seconds
            baseline.setdefault(pigz, seconds)
            print(f"{name[-40:]:<40} {'yes' if pigz else 'no':>6} {len(mine[0].layers):6d} {seconds:7.1f} "
                  f"{statistics.median(p.download for p in mine):15.1f} {statistics.median(p.extract for p in mine):9.1f}"
                  f" {seconds / first:11.2f} {seconds / baseline[pigz]:9.2f}")
    for name in images:
        sizes = layer_sizes(name)
        print(f"{name}: {len(sizes)} layers with files, largest {sizes[0] / MB:.0f} MB of {sum(sizes) / MB:.0f} MB "
              f"({sizes[0] / sum(sizes):.0%}) unpacked")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("images", nargs="+", help="images this engine holds")
    parser.add_argument("--rate", type=float, default=50.0, help="MB/s per connection (default 50)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pigz", action="store_true", help="also pull with unpigz on dockerd's PATH")
    args = parser.parse_args()
    if args.pigz and not shutil.which("unpigz"):
        sys.exit("--pigz: no unpigz on PATH: apt-get install pigz")
    rate = args.rate * MB
    with tempfile.TemporaryDirectory(prefix="pull-bench-") as tmp, registry(Path(tmp) / "registry") as (host, password):
        folder = Path(tmp)
        config = folder / "docker-config"
        config.mkdir()
        subprocess.run(["docker", "--config", str(config), "login", host, "-u", "bench", "--password-stdin"],
                       input=password, text=True, check=True, capture_output=True)
        remotes = {}
        with PacedProxy(int(host.rsplit(":", 1)[1]), rate) as proxy, trusted(proxy.port, folder / "registry" / "ca.crt"):
            for number, image in enumerate(args.images):
                push(image, f"{host}/{REPOSITORY}:{number}", config)
                remotes[image] = f"127.0.0.1:{proxy.port}/{REPOSITORY}:{number}"
            pulls = []
            for round_number in range(args.rounds):
                for image, remote in remotes.items():
                    for pigz in ((False, True) if args.pigz else (False,)):
                        pull = cold_pull(remote, password, folder / f"engine-{round_number}", pigz)
                        print(f"round {round_number + 1}: {image} (unpigz {'yes' if pigz else 'no'}): "
                              f"{pull.seconds:.1f} s", flush=True)
                        pulls.append(pull)
    report(pulls, remotes, rate)


if __name__ == "__main__":
    os.environ.setdefault("DOCKER_CONFIG", str(ROOT / ".cache" / "docker-config"))
    main()
