"""The test session's disk: a wheelhouse goes when the last module that declares it ends, not before, and never
while a fill holds its lock (tests/session/wheelhouses.py)."""

from __future__ import annotations

import fcntl
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.session.wheelhouses import Spent, Wheelhouse, removes_spent


def filled(folder: Path) -> Path:
    folder.mkdir()
    (folder / "torch.whl").write_bytes(b"wheel")
    (folder / ".lock").touch()
    return folder


def module(name: str, *folders: Path) -> SimpleNamespace:
    return SimpleNamespace(__name__=name, WHEELHOUSES=tuple(lambda f=f: Wheelhouse(f, ("torch",)) for f in folders))


def test_a_wheelhouse_goes_after_its_last_module_only(tmp_path: Path) -> None:
    cu121, cu130 = filled(tmp_path / "cu121"), filled(tmp_path / "cu130")
    spent = Spent.of([module("a", cu130), module("b", cu121), SimpleNamespace(__name__="c"), module("d", cu130)])
    spent.module_ended("a")
    assert cu130.is_dir() and cu121.is_dir()  # module d still builds from cu130
    spent.module_ended("b")
    assert not cu121.exists() and cu130.is_dir()
    spent.module_ended("c")
    spent.module_ended("d")
    assert not cu130.exists()
    assert spent.removed == ["cu121 after b", "cu130 after d"]


def test_a_wheelhouse_being_filled_stays(tmp_path: Path) -> None:
    cu121 = filled(tmp_path / "cu121")
    spent = Spent.of([module("a", cu121)])
    with (cu121 / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as scripts/make-wheelhouse.sh holds it while it downloads
        spent.module_ended("a")
    assert (cu121 / "torch.whl").is_file() and spent.removed == []


def test_only_ci_removes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    assert not removes_spent()
    monkeypatch.setenv("CI", "1")
    assert removes_spent()
    monkeypatch.setenv("TORCHIMAGES_KEEP_WHEELHOUSES", "1")
    assert not removes_spent()
