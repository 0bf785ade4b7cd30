"""benchmarks/pull_bench.py's parts that decide what it prints: the pace each proxied connection keeps, the proxy's relay
(bytes both ways, unchanged, over loopback sockets), and the reading of a pull's progress stream into its download and
extract shares. The figures themselves are the benchmark's, never asserted here."""

from __future__ import annotations

import importlib.util
import socket
import sys
import threading
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "pull_bench.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pull_bench", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["pull_bench"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_connection_sends_at_its_rate_and_saves_no_credit_while_idle(bench: ModuleType) -> None:
    pace = bench.Pace(rate=100.0)
    assert pace.wait_after(10.0, 50) == pytest.approx(0.5)
    assert pace.wait_after(10.5, 100) == pytest.approx(1.0)  # sent on time: the next after a second
    assert pace.wait_after(10.7, 100) == pytest.approx(1.8)  # sent early: its own second after the last one's
    # idle for a minute (a keep-alive connection between blobs): the next chunk waits its own time, no burst
    assert pace.wait_after(72.0, 100) == pytest.approx(1.0)


def echo_server() -> tuple[socket.socket, threading.Thread]:
    """A server that answers each connection's bytes three times over, then closes."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        for _ in range(2):
            connection, _address = server.accept()
            with connection:
                received = b""
                while len(received) < 100_000:
                    received += connection.recv(65536)
                connection.sendall(received * 3)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


def test_the_proxy_relays_every_byte_both_ways(bench: ModuleType) -> None:
    server, thread = echo_server()
    payload = bytes(range(256)) * 400  # 102,400 bytes
    with server, bench.PacedProxy(server.getsockname()[1], rate=50e6) as proxy:
        for _ in range(2):  # each connection to the proxy is one to the server
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as client:
                client.sendall(payload[:100_000])
                answer = b""
                while chunk := client.recv(65536):
                    answer += chunk
            assert answer == payload[:100_000] * 3
    thread.join(timeout=30)


# dockerd 20.10's pull stream for a two-layer image, with the seconds each line came at
STREAM = [
    (0.0, {"status": "Pulling from bench/pull", "id": "0"}),
    (0.1, {"status": "Pulling fs layer", "id": "aaa"}),
    (0.1, {"status": "Pulling fs layer", "id": "bbb"}),
    (0.2, {"status": "Downloading", "progressDetail": {"current": 1, "total": 9}, "id": "aaa"}),
    (1.0, {"status": "Verifying Checksum", "id": "aaa"}),
    (1.0, {"status": "Download complete", "id": "aaa"}),
    (1.1, {"status": "Extracting", "progressDetail": {"current": 1, "total": 9}, "id": "aaa"}),
    (2.0, {"status": "Extracting", "progressDetail": {"current": 9, "total": 9}, "id": "aaa"}),
    (2.5, {"status": "Pull complete", "id": "aaa"}),
    (4.0, {"status": "Download complete", "id": "bbb"}),
    (4.2, {"status": "Extracting", "progressDetail": {"current": 1, "total": 9}, "id": "bbb"}),
    (7.2, {"status": "Pull complete", "id": "bbb"}),
    (7.3, {"status": "Digest: sha256:" + "0" * 64}),
    (7.3, {"status": "Status: Downloaded newer image for 127.0.0.1:1/bench/pull:0"}),
]


def test_a_pulls_stream_gives_its_download_and_extract_shares(bench: ModuleType) -> None:
    pull = bench.Pull("127.0.0.1:1/bench/pull:0", pigz=False)
    for at, event in STREAM:
        pull.read(event, at)
    assert sorted(pull.layers) == ["aaa", "bbb"]
    assert pull.download == pytest.approx(4.0)  # the last layer's download
    assert pull.extract == pytest.approx((2.5 - 1.1) + (7.2 - 4.2))  # one after another
