"""What the rendered files do, run here rather than compared with a snapshot: the constraint file pins torch,
the build refuses a torch built for another CUDA, Jupyter always has a token and its healthcheck asks only what needs
none, sshd refuses passwords and root.
The engine tests check the same in built images; these catch a broken template without an engine."""

from __future__ import annotations

import http.server
import json
import os
import re
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import ClassVar

import pytest

from torchimages.build import render
from torchimages.input import matrix, specs

from ..conftest import ROOT, AnsweringHandler

CUDA_ENTRY, CPU_ENTRY = "torch2.3.1-cu121-cudnn8.9-py3.11", "torch2.13.0-cpu-py3.11"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rendered")
    render.write(specs.resolve(matrix.load(ROOT / "matrix.yaml")), "v1", out)
    return out


def clean_env() -> dict[str, str]:
    """This machine's pip settings (its own constraint file, find-links) must not take part."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def pip_freeze_filter(dockerfile: str) -> str:
    [pattern] = re.findall(r"pip list --format=freeze \\\n\s+\| grep -iE '([^']+)'", dockerfile)
    return pattern


FREEZE = "\n".join(["filelock==3.13.1", "numpy==1.26.4", "nvidia-cudnn-cu12==8.9.2.26", "nvidia-nccl-cu12==2.20.5",
                    "torch==2.3.1", "torchvision==0.18.1", "triton==2.3.1", "typing_extensions==4.9.0", ""])


def test_the_constraint_file_pins_torch_and_its_libraries(rendered: Path, tmp_path: Path) -> None:
    dockerfile = (rendered / CUDA_ENTRY / "Dockerfile").read_text()
    picked = subprocess.run(["grep", "-iE", pip_freeze_filter(dockerfile)], input=FREEZE, capture_output=True, text=True,
                            check=False).stdout.split()
    assert picked == ["nvidia-cudnn-cu12==8.9.2.26", "nvidia-nccl-cu12==2.20.5", "torch==2.3.1", "torchvision==0.18.1",
                      "triton==2.3.1"]
    [constraint_path] = re.findall(r"> (/etc/pip/[\w.-]+\.txt)", dockerfile)
    assert re.search(rf"PIP_CONSTRAINT={re.escape(constraint_path)}\b", dockerfile.split("# ---- final image")[-1]), (
        "the final image's PIP_CONSTRAINT does not point at the constraint file")
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("\n".join(picked) + "\n")
    (tmp_path / "empty").mkdir()
    attempt = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--find-links",
                              str(tmp_path / "empty"), "-c", str(constraints), "torch==2.0.0"], capture_output=True,
                             text=True, env=clean_env(), timeout=120, check=False)
    assert attempt.returncode != 0 and "The user requested (constraint) torch==2.3.1" in attempt.stdout + attempt.stderr, (
        attempt.stdout + attempt.stderr)


def cuda_check(dockerfile: str) -> str:
    """The Python the builder runs after installing torch, as Docker joins its continued lines."""
    [code] = re.findall(r'python -c "(import sys, torch;[^"]*)"', dockerfile.replace("\\\n", ""))
    return code


@pytest.mark.parametrize(("entry", "reported", "refused"), [
    (CUDA_ENTRY, "12.1", None),
    (CUDA_ENTRY, "11.8", "torch 2.3.1+fake is built for CUDA 11.8, expected 12.1: the index served another build"),
    (CUDA_ENTRY, None, "torch 2.3.1+fake is built for CUDA None, expected 12.1: the index served another build"),
    (CPU_ENTRY, None, None),
    (CPU_ENTRY, "12.1", "torch 2.3.1+fake is built for CUDA 12.1, expected None: the index served another build"),
])
@pytest.mark.parametrize("syntax", ["Dockerfile", "Dockerfile.buildkit"])
def test_the_build_fails_when_torch_reports_another_cuda(rendered: Path, tmp_path: Path, entry: str, reported: str | None, *,
                                                          refused: str | None, syntax: str) -> None:
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text(f"__version__ = '2.3.1+fake'\n\nclass version:\n    cuda = {reported!r}\n")
    code = cuda_check((rendered / entry / syntax).read_text())
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)})
    if refused is None:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode == 1 and result.stderr.strip() == refused, result.stderr


class Section:
    """A stand-in for traitlets' config sections: attributes set by the config file."""


class Config:
    def __getattr__(self, name: str) -> Section:
        section = Section()
        setattr(self, name, section)
        return section


def read_jupyter_config(rendered: Path, config: Config, capsys: pytest.CaptureFixture[str]) -> str:
    source = (rendered / f"{CPU_ENTRY}-jupyter" / "jupyter" / "jupyter_server_config.py").read_text()
    exec(compile(source, "jupyter_server_config.py", "exec"), {"get_config": lambda: config})
    return capsys.readouterr().out


def test_jupyter_always_has_a_token_and_prints_a_generated_one_once(rendered: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("JUPYTER_TOKEN", raising=False)
    config = Config()
    printed = read_jupyter_config(rendered, config, capsys)
    token = os.environ.get("JUPYTER_TOKEN", "")
    assert re.fullmatch(r"[0-9a-f]{48}", token), f"no generated token: {token!r}"
    assert printed.count(token) == 1
    assert read_jupyter_config(rendered, config, capsys) == "", "read again, the config printed the token again"
    assert os.environ["JUPYTER_TOKEN"] == token
    assert (config.ServerApp.ip, config.ServerApp.allow_root, config.ServerApp.root_dir) == ("0.0.0.0", False, "/workspace")


def test_jupyter_keeps_the_token_the_user_chose(rendered: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("JUPYTER_TOKEN", "chosen-by-the-user")
    assert read_jupyter_config(rendered, Config(), capsys) == ""
    assert os.environ["JUPYTER_TOKEN"] == "chosen-by-the-user"


class JupyterServer(AnsweringHandler):
    """Jupyter Server's API as the healthcheck meets it: GET /api (its version) answers without a token; every other
    /api endpoint answers 403 to a request without one. `api_status`: what GET /api answers (503 while starting)."""

    api_status: ClassVar[int] = 200
    asked: ClassVar[list[tuple[str, str]]] = []  # (path, Authorization header)

    def do_GET(self) -> None:
        JupyterServer.asked.append((self.path, self.headers.get("Authorization") or ""))
        if self.path == "/api":
            self.answer(JupyterServer.api_status, b'{"version": "2.14.2"}', {"Content-Type": "application/json"})
        elif self.path.startswith("/api/"):
            self.answer(403, b'{"message": "Forbidden"}', {"Content-Type": "application/json"})
        else:
            self.answer(404, b"", {})


def healthcheck(rendered: Path, port: int, bin_dir: Path) -> int:
    """The image's HEALTHCHECK command run here, as Docker runs it in the container (python is the image's venv's)."""
    script = rendered / f"{CPU_ENTRY}-jupyter" / "jupyter" / "jupyter-healthcheck"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "python").exists():
        (bin_dir / "python").symlink_to(sys.executable)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "JUPYTER_PORT": str(port)}
    return subprocess.run(["sh", str(script)], env=env, capture_output=True, timeout=30, check=False).returncode


def test_the_jupyter_healthcheck_asks_the_endpoint_that_needs_no_token_on_jupyters_port(rendered: Path,
                                                                                       tmp_path: Path) -> None:
    dockerfile = (rendered / f"{CPU_ENTRY}-jupyter" / "Dockerfile").read_text()
    assert re.search(r'^HEALTHCHECK .* CMD \["jupyter-healthcheck"\]$', dockerfile, re.M)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), JupyterServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_port
    try:
        JupyterServer.asked, JupyterServer.api_status = [], 200
        assert healthcheck(rendered, port, tmp_path / "bin") == 0, JupyterServer.asked
        assert JupyterServer.asked == [("/api", "")], "one request, to the endpoint that needs no token, without one"
        JupyterServer.api_status = 503  # a server that answers but is not ready
        assert healthcheck(rendered, port, tmp_path / "bin") != 0
    finally:
        server.shutdown()
        server.server_close()
    assert healthcheck(rendered, port, tmp_path / "bin") != 0, "nothing listens on JUPYTER_PORT any more"


def sshd_settings(text: str) -> dict[str, str]:
    """sshd's reading of a configuration: keywords are case-insensitive and the first value of each wins."""
    settings: dict[str, str] = {}
    for line in text.splitlines():
        words = line.split(None, 1)
        if len(words) == 2 and not words[0].startswith("#"):
            settings.setdefault(words[0].lower(), words[1].strip())
    return settings


def test_sshd_allows_keys_only_and_never_root(rendered: Path) -> None:
    settings = sshd_settings((rendered / f"{CPU_ENTRY}-ssh" / "ssh" / "sshd_config").read_text())
    wanted = {"pubkeyauthentication": "yes", "passwordauthentication": "no", "kbdinteractiveauthentication": "no",
              "permitrootlogin": "no", "permitemptypasswords": "no"}
    assert {key: settings.get(key) for key in wanted} == wanted
    start = (rendered / f"{CPU_ENTRY}-ssh" / "ssh" / "start-sshd").read_text()
    appended = re.findall(r'echo "([A-Za-z]+) [^"]*" >> "\$\{config\}"', start) + re.findall(r"echo \"\$\{(setenv)\}\"", start)
    assert {word.lower() for word in appended} <= {"hostkey", "pidfile", "setenv"}, appended


def fake_distribution(site: Path, name: str, files: dict[str, int]) -> None:
    """A distribution as pip leaves it: its files (`files`: path from site-packages -> size) and a RECORD listing them."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    for path, size in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(b"x" * size)
    (info / "RECORD").write_text("".join(f"{path},sha256=x,{size}\n" for path, size in files.items()) + f"{info.name}/RECORD,,\n")


def staged_pieces(layer: Path) -> dict[str, str]:
    """Each file and link under the pieces (its path in the image) -> the piece holding it; one held twice fails."""
    held: dict[str, str] = {}
    for piece in sorted(layer.iterdir()):
        for path in piece.rglob("*"):
            if path.is_symlink() or path.is_file():
                name = "/" + str(path.relative_to(piece))
                assert name not in held, f"{name} is in {held[name]} and in {piece.name}"
                held[name] = piece.name
    return held


def test_the_torch_layer_is_staged_in_pieces_each_file_in_one_with_every_time_clamped(rendered: Path, tmp_path: Path) -> None:
    """The classic builder's torch step, its end run here on a venv-shaped tree: each distribution's files whole in one
    piece (torch, triton, the CUDA libraries shared by size among the nvidia pieces, the rest last), each file in one
    piece, the environment the user's group's, folders as they were, every time clamped; the final image copies the
    pieces in that order (docs/building.md, "The torch layer in pieces")."""
    dockerfile = (rendered / CUDA_ENTRY / "Dockerfile").read_text().replace("\\\n", "")
    [(split, pieces)] = re.findall(r"(/opt/venv/bin/python -S /tmp/build-config/split-environment.py /tmp/torch-layer "
                                   r"(\S+) +\"\$\{USER_GID\}\" [^;]+);", dockerfile)
    [clamp] = re.findall(r"(find /tmp/torch-layer -newermt [^\n]*?\{\} \+)", dockerfile)
    spec = next(s for s in specs.resolve(matrix.load(ROOT / "matrix.yaml")).specs if s.name == CUDA_ENTRY)
    assert pieces.split(",") == render.environment_pieces(spec) == [*(f"nvidia-{n}" for n in range(1, 5)), "torch", "triton",
                                                                    "environment"]
    final = dockerfile.split("# ---- final image")[-1]
    assert re.findall(r"COPY --from=builder /tmp/torch-layer/(\S+)/ /", final) == pieces.split(",")
    venv, python, pip_config = tmp_path / "opt/venv", tmp_path / "opt/python", tmp_path / "etc/pip"
    site = venv / "lib/python3.11/site-packages"
    for name, files in {"torch": {"torch/__init__.py": 10, "torch/lib/libtorch.so": 5000, "../../../bin/torchrun": 5},
                        "triton": {"triton/__init__.py": 10},
                        "nvidia_cudnn_cu12": {"nvidia/__init__.py": 0, "nvidia/cudnn/lib/libcudnn.so.8": 4000},
                        "nvidia_cublas_cu12": {"nvidia/__init__.py": 0, "nvidia/cublas/lib/libcublas.so.12": 3000},
                        "nvidia_nccl_cu12": {"nvidia/__init__.py": 0, "nvidia/nccl/lib/libnccl.so.2": 2000},
                        "nvidia_cuda_runtime_cu12": {"nvidia/cuda_runtime/lib/libcudart.so.12": 500},
                        "nvidia_nvtx_cu12": {"nvidia/nvtx/include/nvtx.h": 10},
                        "numpy": {"numpy/__init__.py": 10}}.items():
        fake_distribution(site, name, files)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "bin/python").symlink_to("/usr/bin/python3")
    (venv / "include").mkdir()
    site.chmod(0o2775)
    python.mkdir()
    pip_config.mkdir(parents=True)
    (pip_config / "torchimages-constraints.txt").write_text("torch==2.3.1\n")
    script = rendered / CUDA_ENTRY / "build-config" / "split-environment.py"
    command = split.replace("/opt/venv/bin/python", sys.executable).replace("/tmp/build-config/split-environment.py", str(script))
    for path in ("/tmp/torch-layer", "/opt/venv", "/opt/python", "/etc/pip"):
        command, clamp = (text.replace(path, str(tmp_path / path.lstrip("/"))) for text in (command, clamp))
    epoch = 1767225600
    for step in (command, clamp):
        subprocess.run(["bash", "-c", step], env={**os.environ, "USER_GID": "4321", "SOURCE_DATE_EPOCH": str(epoch)},
                       check=True, timeout=60, capture_output=True)
    layer = tmp_path / "tmp/torch-layer"
    held = {name.removeprefix(str(tmp_path)): piece for name, piece in staged_pieces(layer).items()}
    source = {"/" + str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if (p.is_file() or p.is_symlink())
              and layer not in p.parents}
    assert set(held) == source, f"not staged: {sorted(source - set(held))}, staged from nowhere: {sorted(set(held) - source)}"
    where = {name.removeprefix("/opt/venv/lib/python3.11/site-packages/"): piece for name, piece in held.items()}
    assert {name: where[name] for name in ("torch/lib/libtorch.so", "/opt/venv/bin/torchrun", "triton/__init__.py",
                                           "nvidia/cudnn/lib/libcudnn.so.8", "nvidia/__init__.py",
                                           "nvidia/cublas/lib/libcublas.so.12", "nvidia/nccl/lib/libnccl.so.2",
                                           "nvidia/cuda_runtime/lib/libcudart.so.12", "nvidia/nvtx/include/nvtx.h",
                                           "numpy/__init__.py", "/opt/venv/pyvenv.cfg", "/opt/venv/bin/python",
                                           "/etc/pip/torchimages-constraints.txt")} == {
        "torch/lib/libtorch.so": "torch", "/opt/venv/bin/torchrun": "torch", "triton/__init__.py": "triton",
        # the largest first, each into the piece holding the fewest bytes; a file three RECORDs list, into the first
        "nvidia/cudnn/lib/libcudnn.so.8": "nvidia-1", "nvidia/__init__.py": "nvidia-1",
        "nvidia/cublas/lib/libcublas.so.12": "nvidia-2", "nvidia/nccl/lib/libnccl.so.2": "nvidia-3",
        "nvidia/cuda_runtime/lib/libcudart.so.12": "nvidia-4", "nvidia/nvtx/include/nvtx.h": "nvidia-4",
        "numpy/__init__.py": "environment", "/opt/venv/pyvenv.cfg": "environment", "/opt/venv/bin/python": "environment",
        "/etc/pip/torchimages-constraints.txt": "environment"}
    staged_site = layer / "torch" / site.relative_to("/")
    assert (layer / "environment" / (venv / "include").relative_to("/")).is_dir(), "an empty folder of the venv was left out"
    assert not (layer / "torch" / pip_config.relative_to("/")).exists(), "a piece holds a folder with nothing of its own"
    assert stat.S_IMODE(staged_site.stat().st_mode) == 0o2775, "a folder's mode was not kept"
    for path in [staged_site, *staged_site.rglob("*"), layer / "environment" / venv.relative_to("/") / "bin/python"]:
        assert (path.lstat().st_uid, path.lstat().st_gid) == (0, 4321), f"{path} is not the user group's"
    constraints = layer / "environment" / pip_config.relative_to("/") / "torchimages-constraints.txt"
    assert constraints.stat().st_gid == 0, "a file outside the venv was given the user's group"
    times = {path: path.lstat().st_mtime for path in [layer, *layer.rglob("*")]}
    assert all(mtime == epoch for mtime in times.values()), [p for p, t in times.items() if t != epoch][:5]


def test_each_steps_report_is_kept_in_name_order_and_pips_requested_marks_go(rendered: Path, tmp_path: Path) -> None:
    """build-config/keep-pip-report.py as every install step runs it, with the step's Python (here a venv's): the
    report reduced to each wheel's name, version and download, sorted by name (pip reports in install order, which a
    rebuild from the lock changes); REQUESTED marks and their RECORD lines gone, every other line kept byte for byte
    (pip ends them in CR LF)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    [site] = venv.glob("lib/python*/site-packages")
    for name in ("beta", "alpha", "gamma"):  # gamma: a package of an earlier step, which this one leaves alone
        info = site / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "REQUESTED").write_text("")
        (info / "RECORD").write_bytes(f"{name}.py,sha256=x,5\r\n{info.name}/REQUESTED,,\r\n{info.name}/RECORD,,\r\n".encode())
    download = {"url": "file:///w/beta-1.0-py3-none-any.whl", "archive_info": {"hashes": {"sha256": "ab" * 32}}}
    report = {"version": "1", "environment": {"platform_release": "6.1.0-build-host"}, "install": [
        {"metadata": {"name": name, "version": "1.0", "summary": "s"}, "download_info": download, "requested": True}
        for name in ("beta", "Alpha")]}
    (tmp_path / "report.json").write_text(json.dumps(report))
    script = rendered / CPU_ENTRY / "build-config" / "keep-pip-report.py"
    subprocess.run([str(venv / "bin" / "python"), str(script), str(tmp_path / "report.json"), str(tmp_path / "out.json"),
                    "--forget-requested"], check=True, timeout=60)
    kept = json.loads((tmp_path / "out.json").read_text())
    assert kept == {"version": "1", "install": [{"metadata": {"name": name, "version": "1.0"}, "download_info": download}
                                                for name in ("Alpha", "beta")]}
    gamma = site / "gamma-1.0.dist-info"
    assert (gamma / "REQUESTED").exists() and b"REQUESTED" in (gamma / "RECORD").read_bytes()
    for name in ("alpha", "beta"):
        info = site / f"{name}-1.0.dist-info"
        assert not (info / "REQUESTED").exists()
        assert (info / "RECORD").read_bytes() == f"{name}.py,sha256=x,5\r\n{info.name}/RECORD,,\r\n".encode()
