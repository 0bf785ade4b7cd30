"""SSH as users start it (the default command, `sshd`, `/usr/sbin/sshd -D`): a key given at run time
logs in; passwords and root never do."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest
import testinfra

from .conftest import Facts, run

OPTIONS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10",
           "-o", "LogLevel=ERROR"]


SERVICE = "ssh"  # one run of each `server` check per form in facts.ssh (conftest.pytest_generate_tests)


@pytest.fixture
def server(server_name: str, facts: Facts) -> dict[str, Any]:
    return facts.ssh[server_name]


def ssh(server: dict, *args: str, user: str | None = None, key: bool = True,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    identity = ["-i", server["key"], "-o", "IdentitiesOnly=yes"] if key else []
    command = ["ssh", *OPTIONS, *identity, "-p", str(server["port"]), f"{user or server['user']}@127.0.0.1", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL)


def started_as(server: dict) -> str:
    return " ".join(server["command"]) if server["command"] else "the default command"


def test_key_login_runs_torch_with_the_container_environment(server_name: str, server: dict, facts: Facts) -> None:
    first_form = next(iter(facts.ssh))
    if facts.emulated and server_name != first_form:
        # Under emulation each `import torch` costs about 30 s. The first form runs torch over ssh; in every form the
        # key login, the session's Python and its environment are checked by the checks below, which import nothing.
        pytest.skip(f"the image runs under emulation: torch over ssh runs in the {first_form!r} form; "
                    "this form's Python and environment are checked without importing torch")
    result = ssh(server, "-o", "BatchMode=yes",
                 "python -c 'import os, torch; print(torch.__version__); print(os.environ.get(\"NVIDIA_VISIBLE_DEVICES\"))'",
                 timeout=facts.seconds(60))
    assert result.returncode == 0, f"key login to sshd started with {started_as(server)} failed: {result.stderr}"
    version, visible = result.stdout.split()[:2]
    assert version.split("+")[0] == facts.expected["torch"].split("+")[0], "the ssh session runs another Python"
    assert visible == "all", "NVIDIA_VISIBLE_DEVICES is missing in the ssh session"


SESSION_VARIABLES = re.compile(r"^(PATH|LD_LIBRARY_PATH|CUDA[A-Z_]*|NCCL_[A-Z_]+|NVIDIA_[A-Z_]+)=")


def container_environment(server: dict) -> dict[str, str]:
    """The environment the container was started with (its first process's), restricted to SESSION_VARIABLES."""
    host = testinfra.get_host(f"docker://{server['container']}")
    raw = run(host, "cat /proc/1/environ").stdout
    return dict(v.split("=", 1) for v in raw.split("\0") if SESSION_VARIABLES.match(v))


@pytest.mark.parametrize("shell", ["command", "login shell"])
def test_session_has_the_container_path_library_path_and_cuda_variables(server: dict, facts: Facts, shell: str) -> None:
    wanted = container_environment(server)
    assert {"PATH", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"} <= set(wanted), wanted
    if facts.flavor != "cpu":
        assert "LD_LIBRARY_PATH" in wanted, "a CUDA image without LD_LIBRARY_PATH: the driver's libraries are not found"
    command = "env" if shell == "command" else "bash -lc env"
    result = ssh(server, "-o", "BatchMode=yes", command)
    assert result.returncode == 0, result.stderr
    seen = dict(line.split("=", 1) for line in result.stdout.splitlines() if SESSION_VARIABLES.match(line))
    differ = {name: (value, seen.get(name)) for name, value in wanted.items() if seen.get(name) != value}
    assert not differ, f"ssh sessions ({shell}) lack the container's values (container, session): {differ}"
    python = ssh(server, "-o", "BatchMode=yes", "command -v python").stdout.strip()
    assert python == server["python"], (
        f"python in an ssh session is {python or 'missing'}, in the container {server['python']}: the session's PATH "
        "lacks the image's Python")


def test_tmux_is_there_for_long_jobs(server: dict) -> None:
    result = ssh(server, "-o", "BatchMode=yes", "tmux -V")
    assert result.returncode == 0 and result.stdout.startswith("tmux "), f"no tmux in ssh sessions: {result.stderr}"


def host_key(server: dict) -> str:
    host = testinfra.get_host(f"docker://{server['container']}")
    result = run(host, "sh -c 'cat \"$HOME/.sshd/ssh_host_ed25519_key.pub\"'")
    assert result.rc == 0, f"no host key made at start in ~/.sshd: {result.stderr}"
    return result.stdout.split()[1]


def test_host_keys_are_made_at_start_in_home_sshd(server: dict) -> None:
    offered = subprocess.run(["ssh-keyscan", "-t", "rsa,ecdsa,ed25519", "-p", str(server["port"]), "127.0.0.1"],
                             capture_output=True, text=True, timeout=30, check=False).stdout.splitlines()
    # no RSA host key: making one is seconds of every start (start-sshd)
    assert sorted(line.split()[1] for line in offered) == ["ecdsa-sha2-nistp256", "ssh-ed25519"], offered
    served = dict(line.split()[1:3] for line in offered)
    assert served["ssh-ed25519"] == host_key(server), f"sshd serves {offered}, not the key made in ~/.sshd"


def test_each_container_has_its_own_host_key(facts: Facts) -> None:
    keys = {name: host_key(server) for name, server in facts.ssh.items()}
    assert len(set(keys.values())) == len(keys), f"containers share host keys: {keys}"


def advertised_methods(result: subprocess.CompletedProcess[str]) -> set[str]:
    match = re.search(r"Permission denied \(([^)]*)\)", result.stderr)
    return set(match.group(1).split(",")) if match else set()


def effective_config(server: dict) -> dict[str, str]:
    """sshd's own reading of the configuration start-sshd wrote (`sshd -T`), in the running container."""
    host = testinfra.get_host(f"docker://{server['container']}")
    result = run(host, "sh -c '/usr/sbin/sshd -T -f \"$HOME/.sshd/sshd_config\"'")
    assert result.rc == 0, f"sshd -T failed: {result.stderr}"
    return dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)


def test_password_login_is_refused(server: dict) -> None:
    result = ssh(server, "-o", "BatchMode=yes", "-o", "PubkeyAuthentication=no",
                 "-o", "PreferredAuthentications=password,keyboard-interactive", "true", key=False)
    assert result.returncode != 0, "a login without a key succeeded"
    methods = advertised_methods(result)
    assert methods and not methods & {"password", "keyboard-interactive"}, (
        f"sshd offers {sorted(methods) or result.stderr!r}: password login must be off (PasswordAuthentication no)")
    config = effective_config(server)
    assert (config["passwordauthentication"], config["kbdinteractiveauthentication"]) == ("no", "no"), config


def test_root_login_is_refused(server: dict) -> None:
    result = ssh(server, "-o", "BatchMode=yes", "id -u", user="root")
    assert result.returncode != 0 and result.stdout.strip() != "0", "root logged in over ssh"
    # An unprivileged sshd could not log root in anyway: the configuration must refuse it too, for the day
    # someone runs the image as root.
    assert effective_config(server)["permitrootlogin"] == "no", "sshd's configuration permits root logins"
