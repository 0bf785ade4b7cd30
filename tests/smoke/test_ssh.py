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


def ssh(server: dict, *args: str, user: str | None = None, key: bool = True) -> subprocess.CompletedProcess[str]:
    identity = ["-i", server["key"], "-o", "IdentitiesOnly=yes"] if key else []
    command = ["ssh", *OPTIONS, *identity, "-p", str(server["port"]), f"{user or server['user']}@127.0.0.1", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)


def started_as(server: dict) -> str:
    return " ".join(server["command"]) if server["command"] else "the default command"


def test_key_login_runs_torch_with_the_container_environment(server: dict, facts: Facts) -> None:
    result = ssh(server, "-o", "BatchMode=yes",
                 "python -c 'import os, torch; print(torch.__version__); print(os.environ.get(\"NVIDIA_VISIBLE_DEVICES\"))'")
    assert result.returncode == 0, f"key login to sshd started with {started_as(server)} failed: {result.stderr}"
    version, visible = result.stdout.split()[:2]
    assert version.split("+")[0] == facts.expected["torch"].split("+")[0], "the ssh session runs another Python"
    assert visible == "all", "NVIDIA_VISIBLE_DEVICES is missing in the ssh session"


def test_session_has_the_cuda_and_nvidia_variables(server: dict) -> None:
    result = ssh(server, "-o", "BatchMode=yes", "env")
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines()}
    missing = {"PATH", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"} - names
    assert not missing, f"missing in ssh sessions: {missing}"
    python = ssh(server, "-o", "BatchMode=yes", "command -v python").stdout.strip()
    assert python == server["python"], (
        f"python in an ssh session is {python or 'missing'}, in the container {server['python']}: the session's PATH "
        "lacks the image's Python")


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
