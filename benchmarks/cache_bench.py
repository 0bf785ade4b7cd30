"""Rebuilding an unchanged entry on an empty engine with --cache-from previous, against its cold build (issue 13).

    .venv/bin/python benchmarks/cache_bench.py [--entry torch2.13.0-cpu-py3.11] -- BUILD INPUTS
    e.g. ... -- --base-image torchimages/debian:bookworm-minbase --wheelhouse .cache/wheelhouse --offline

Runs as root on a machine with a Docker engine (scripts/start-engine.sh), in one run:
1. cold: `build --no-cache` of the entry and its variants on this engine (every step runs);
2. `test` and `push` them to a private registry started here: the previous release and its manifest;
3. an empty second engine (its own dockerd, data root and bridge) that holds only the FROM image, as a CI
   runner that pulled its base would;
4. on it, the previous release's images are pulled (as the release workflow does first), then the next release
   is built with `--previous MANIFEST --cache-from previous`.
Prints each time and the ratios warm/cold and (pull + warm)/cold. Goal: warm under 0.2x cold.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
BRIDGE, BRIDGE_ADDRESS = "tibench0", "10.199.0.1/24"


def build_py(*args: str, env: dict[str, str] | None = None) -> float:
    """Run build.py; its wall time. A failure stops the benchmark with the command's last output."""
    started = time.perf_counter()
    result = subprocess.run([sys.executable, str(ROOT / "build.py"), *args], cwd=ROOT, env=env, capture_output=True,
                            text=True, check=False)
    took = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"build.py {' '.join(args[:3])} ... failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return took


@contextmanager
def registry(folder: Path) -> Iterator[tuple[str, str]]:
    """A private registry (distribution, TLS, htpasswd) on a free port: (host, password)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    password = secrets.token_hex(12)
    subprocess.run(["bash", str(ROOT / "scripts" / "start-registry.sh"), str(folder), str(port), "bench"],
                   input=password + "\n", text=True, check=True, capture_output=True)
    try:
        yield f"127.0.0.1:{port}", password
    finally:
        subprocess.run(["kill", (folder / "registry.pid").read_text().strip()], check=False)


@contextmanager
def empty_engine(folder: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """A second dockerd with its own data root, socket and bridge: an engine that has never built anything (`env`: its
    environment, this process's by default).

    Its own bridge, never `--bridge none`: that makes dockerd delete docker0, which the first engine needs. No NAT is
    set up for it: a reused image runs no step, so the warm build needs no network (a step that runs fails loudly).
    """
    if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True, check=False).returncode != 0:
        for command in (["ip", "link", "add", "name", BRIDGE, "type", "bridge"],
                        ["ip", "addr", "add", BRIDGE_ADDRESS, "dev", BRIDGE], ["ip", "link", "set", BRIDGE, "up"]):
            subprocess.run(command, check=True)
    folder.mkdir(parents=True, exist_ok=True)
    socket_path = folder / "docker.sock"
    log = (folder / "dockerd.log").open("w")
    daemon = subprocess.Popen(["dockerd", "--data-root", str(folder / "root"), "--exec-root", str(folder / "exec"),
                               "-H", f"unix://{socket_path}", "--pidfile", str(folder / "docker.pid"),
                               "--bridge", BRIDGE, "--iptables=false", "--ip-masq=false"],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    address = f"unix://{socket_path}"
    try:
        for _ in range(60):
            try:
                docker.APIClient(base_url=address).ping()
                break
            except Exception:  # not up yet
                time.sleep(0.5)
        else:
            sys.exit(f"the empty engine did not start; see {folder / 'dockerd.log'}")
        yield address
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        subprocess.run(["ip", "link", "delete", BRIDGE], check=False)


def copy_image(reference: str, target: str) -> float:
    """Load an image of this engine into the empty one (the FROM image a runner pulls before it builds)."""
    started = time.perf_counter()
    saved = subprocess.Popen(["docker", "save", reference], stdout=subprocess.PIPE)
    subprocess.run(["docker", "load", "-q"], stdin=saved.stdout, env=dict(os.environ, DOCKER_HOST=target),
                   check=True, capture_output=True)
    saved.wait()
    return time.perf_counter() - started


def option_value(inputs: list[str], name: str) -> str | None:
    return inputs[inputs.index(name) + 1] if name in inputs else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entry", default="torch2.13.0-cpu-py3.11")
    parser.add_argument("inputs", nargs="*", help="build inputs after --, e.g. --wheelhouse DIR --offline")
    args = parser.parse_args()
    only = ["--only", f"{args.entry}*"]
    base_image = option_value(args.inputs, "--base-image")
    with tempfile.TemporaryDirectory(prefix="cache-bench-") as tmp, registry(Path(tmp) / "registry") as (host, password):
        folder = Path(tmp)
        env = dict(os.environ, TORCHIMAGES_REGISTRY_PASSWORD=password)
        login = ["--registry", f"{host}/bench", "--registry-user", "bench"]
        build_py("render", "--tag", "bench-prev", "--out", str(folder / "prev"))
        build_py("render", "--tag", "bench-next", "--out", str(folder / "next"))
        cold = build_py("build", "--tag", "bench-prev", "--images", str(folder / "prev"), *only, "--no-cache",
                        "--plain", "--report", str(folder / "prev.json"), "--logs", str(folder / "logs"), *args.inputs)
        print(f"cold build (--no-cache, {args.entry} and its variants): {cold:.1f} s", flush=True)
        build_py("test", "--tag", "bench-prev", *only, "--report", str(folder / "prev.json"), "--logs", str(folder / "logs"))
        build_py("push", "--tag", "bench-prev", "--report", str(folder / "prev.json"), *login,
                 "--manifest", str(folder / "previous.json"), "--logs", str(folder / "logs"), env=env)
        manifest = json.loads((folder / "previous.json").read_text())
        references = [image["reference"] for image in manifest["images"]]
        print(f"previous release pushed: {len(references)} images", flush=True)
        with empty_engine(folder / "engine") as address:
            loaded = copy_image(base_image or "debian:bookworm-slim", address)
            engine = docker.APIClient(base_url=address)
            print(f"empty engine: {len(engine.images())} images after loading the FROM image ({loaded:.1f} s)")
            started = time.perf_counter()
            for reference in references:
                for chunk in engine.pull(reference, stream=True, decode=True,
                                         auth_config={"username": "bench", "password": password}):
                    if "error" in chunk:
                        sys.exit(f"pulling {reference}: {chunk['error']}")
            pulled = time.perf_counter() - started
            print(f"pull of the previous release's {len(references)} images: {pulled:.1f} s", flush=True)
            warm = build_py("build", "--tag", "bench-next", "--images", str(folder / "next"), *only, "--plain",
                            "--previous", str(folder / "previous.json"), "--cache-from", "previous", *login,
                            "--report", str(folder / "next.json"), "--logs", str(folder / "logs"), *args.inputs,
                            env=dict(env, DOCKER_HOST=address))
            records = json.loads((folder / "next.json").read_text())["images"]
            reused = sum(1 for record in records if record.get("reused"))
        print(f"warm build on the empty engine (--cache-from previous): {warm:.1f} s; {reused} of {len(records)} "
              "images reused")
        print(f"ratio warm/cold: {warm / cold:.3f}x (goal under 0.2x); (pull + warm)/cold: {(pulled + warm) / cold:.3f}x")
        for record in json.loads((folder / "prev.json").read_text())["images"]:  # the cold images, on this engine
            subprocess.run(["docker", "rmi", record["tag"]], capture_output=True, check=False)


if __name__ == "__main__":
    main()
