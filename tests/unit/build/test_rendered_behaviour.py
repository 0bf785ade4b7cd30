"""What the rendered files do, run here rather than compared with a snapshot: the constraint file pins torch,
the build refuses a torch built for another CUDA, Jupyter always has a token, sshd refuses passwords and root.
The engine tests check the same in built images; these catch a broken template without an engine."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from torchimages.build import render
from torchimages.input import matrix, specs

from ..conftest import ROOT

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
