"""Image hygiene: not root, no baked SSH host keys, the labels users and the suite rely on."""

from __future__ import annotations

from typing import Any

from .conftest import Facts, run

REQUIRED = ("torch", "cuda", "cudnn", "nccl", "python", "min-driver", "flavor", "variant")
OCI = ("title", "version", "source", "base.name", "description")


def test_default_user_is_not_root(facts: Facts) -> None:
    user = facts.user or "root"
    assert user.split(":")[0] not in ("", "0", "root"), (
        f"the image's default user is {user!r}: set USER to the non-root user in the template")


def test_container_runs_as_non_root(host: Any) -> None:
    assert run(host, "id -u").stdout.strip() != "0", "the running container is root"


def test_no_ssh_host_keys_in_the_image(host: Any) -> None:
    result = run(host, "sh -c 'ls /etc/ssh/ssh_host_* 2>/dev/null || true'")
    assert result.stdout.strip() == "", (
        f"SSH host keys are baked into the image ({result.stdout.split()}): every container would share them; "
        "remove them at build time and generate them at start")


def test_required_labels(facts: Facts) -> None:
    missing = [f"{facts.label_prefix}.{name}" for name in REQUIRED if f"{facts.label_prefix}.{name}" not in facts.labels]
    missing += [f"org.opencontainers.image.{name}" for name in OCI if f"org.opencontainers.image.{name}" not in facts.labels]
    assert not missing, f"labels missing: {missing}"
    assert facts.labels[f"{facts.label_prefix}.variant"] == facts.variant
