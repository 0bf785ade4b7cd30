"""The wheel lock (torchimages/wheellock.py): read from pip's own installation report over real wheel files, written
in the format pip's hash-checking mode reads, and checked against a wheelhouse and an index served on loopback, through
`build.py wheels` as a user types it."""

from __future__ import annotations

import hashlib
import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from tests.buildpy import build_py
from tests.integration.stub_wheels import stub_wheel
from torchimages import wheellock
from torchimages.errors import UserError

from .conftest import AnsweringHandler

PACKAGES = (("alpha", "1.2.0"), ("beta-tools", "0.3.1"))


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    folder = tmp_path / "wheelhouse"
    folder.mkdir()
    for name, version in PACKAGES:
        stub_wheel(folder, name.replace("-", "_"), version, {f"{name.replace('-', '_')}/__init__.py": "x = 1\n"})
    return folder


def pip_report(wheelhouse: Path, out: Path, *requirements: str) -> Path:
    """What pip itself reports installing these requirements from the wheelhouse alone (nothing is installed)."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index",
                    "--find-links", str(wheelhouse), "--report", str(out), "-q", *requirements],
                   check=True, capture_output=True, text=True, timeout=120)
    return out


@pytest.fixture
def lock(wheelhouse: Path, tmp_path: Path) -> Path:
    report = pip_report(wheelhouse, tmp_path / "report.json", "alpha==1.2.0", "beta_tools==0.3.1")
    result = build_py("wheels", "lock", str(report), "--out", str(tmp_path / "image.txt"))
    assert result.returncode == 0, result.stderr
    assert "2 wheels locked" in result.stderr
    return tmp_path / "image.txt"


def test_the_lock_names_each_wheel_pip_installed_by_its_files_sha256(lock: Path, wheelhouse: Path) -> None:
    wheels = wheellock.read_lock(lock)
    assert [(w.name, w.version) for w in wheels] == [("alpha", "1.2.0"), ("beta_tools", "0.3.1")]
    for wheel in wheels:
        path = wheelhouse / wheel.file
        assert wheel.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        assert wheel.url == path.as_uri()


def test_pip_installs_from_the_lock_in_hash_checking_mode_and_refuses_another_file(lock: Path, wheelhouse: Path,
                                                                                   tmp_path: Path) -> None:
    def pip_from(lock_file: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index",
                               "--find-links", str(wheelhouse), "--require-hashes", "-r", str(lock_file)],
                              capture_output=True, text=True, timeout=120, check=False)

    accepted = pip_from(lock)
    assert accepted.returncode == 0 and "Would install alpha-1.2.0 beta_tools-0.3.1" in accepted.stdout, accepted.stderr
    wheel = wheellock.read_lock(lock)[0]
    changed = tmp_path / "changed.txt"
    changed.write_text(lock.read_text().replace(wheel.sha256, "0" * 64))
    refused = pip_from(changed)
    assert refused.returncode != 0 and "THESE PACKAGES DO NOT MATCH THE HASHES" in refused.stderr, refused.stderr


def test_check_finds_every_wheel_in_the_wheelhouse(lock: Path, wheelhouse: Path) -> None:
    result = build_py("wheels", "check", str(lock), "--wheelhouse", str(wheelhouse), "--offline")
    assert result.returncode == 0, result.stderr
    assert f"2 of 2 locked wheels served by: wheelhouse {wheelhouse}" in result.stdout


def test_a_wheel_gone_from_the_wheelhouse_is_one_line_naming_it_its_hash_and_where_it_was_looked_for(
        lock: Path, wheelhouse: Path) -> None:
    gone = wheellock.read_lock(lock)[1]
    (wheelhouse / gone.file).unlink()
    result = build_py("wheels", "check", str(lock), "--wheelhouse", str(wheelhouse), "--offline")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"beta_tools==0.3.1 ({gone.file}, sha256:{gone.sha256}) is served by no source: wheelhouse {wheelhouse}: "
        "no such file"]
    assert "1 of 2 locked wheels served" in result.stdout


def test_a_wheel_replaced_by_another_file_of_the_same_name_is_not_served(lock: Path, wheelhouse: Path) -> None:
    wheel = wheellock.read_lock(lock)[0]
    stub_wheel(wheelhouse, "alpha", "1.2.0", {"alpha/__init__.py": "x = 2\n"})  # the same name, other bytes
    now = hashlib.sha256((wheelhouse / wheel.file).read_bytes()).hexdigest()
    result = build_py("wheels", "check", str(lock), "--wheelhouse", str(wheelhouse), "--offline")
    assert result.returncode == 1
    assert f"alpha==1.2.0 ({wheel.file}, sha256:{wheel.sha256})" in result.stderr
    assert f"its file has sha256:{now}" in result.stderr


class IndexPages(AnsweringHandler):
    """A package index on loopback: /simple/NAME/ as PEP 503 HTML, each file with the sha256 `listed` gives it, and
    the files themselves under /files/ (`served`: what it sends for each)."""

    listed: ClassVar[dict[str, tuple[str, str]]] = {}  # canonical name -> (file, sha256)
    served: ClassVar[dict[str, bytes]] = {}  # file -> bytes
    href: ClassVar[str] = "../../files/{file}"

    def do_GET(self) -> None:
        if self.path.startswith("/files/") and self.path.removeprefix("/files/") in self.served:
            self.answer(200, self.served[self.path.removeprefix("/files/")], {})
            return
        name = self.path.strip("/").split("/")[-1]
        if name not in self.listed:
            self.answer(404, b"not found", {})
            return
        file, sha = self.listed[name]
        page = f'<html><body><a href="{self.href.format(file=file)}#sha256={sha}">{file}</a></body></html>'
        self.answer(200, page.encode(), {"Content-Type": "text/html"})


@pytest.fixture
def index(lock: Path, wheelhouse: Path) -> Iterator[str]:
    IndexPages.listed = {wheellock.canonical(w.name): (w.file, w.sha256) for w in wheellock.read_lock(lock)}
    IndexPages.served = {w.file: (wheelhouse / w.file).read_bytes() for w in wheellock.read_lock(lock)}
    IndexPages.href = "../../files/{file}"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), IndexPages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/simple/"
    server.shutdown()


def test_check_reads_an_index_page_and_the_hash_it_lists(lock: Path, index: str) -> None:
    served = build_py("wheels", "check", str(lock), "--pip-index-url", index, "--torch-index-url", index)
    assert served.returncode == 0, served.stderr
    wheel = wheellock.read_lock(lock)[0]
    IndexPages.listed["alpha"] = (wheel.file, "f" * 64)  # the index now serves other bytes under that name
    del IndexPages.listed["beta-tools"]
    result = build_py("wheels", "check", str(lock), "--pip-index-url", index, "--torch-index-url", index)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 2, lines
    assert f"index {index}: lists it with sha256:{'f' * 64}" in lines[0]
    assert f"index {index}: no page {index}beta-tools/" in lines[1]


def test_an_index_page_in_json_gives_each_files_hash() -> None:
    page = json.dumps({"meta": {"api-version": "1.1"}, "files": [
        {"filename": "a-1-py3-none-any.whl", "url": "../../f/a-1-py3-none-any.whl", "hashes": {"sha256": "ab" * 32}},
        {"filename": "a-1.tar.gz", "url": "https://files.example.org/a-1.tar.gz", "hashes": {}}]})
    assert wheellock.listed_files(page.encode(), "https://i.example.org/simple/a/") == {
        "a-1-py3-none-any.whl": ("ab" * 32, "https://i.example.org/f/a-1-py3-none-any.whl"),
        "a-1.tar.gz": ("", "https://files.example.org/a-1.tar.gz")}
    with pytest.raises(ValueError, match="not an index page"):
        wheellock.listed_hashes(b'{"files": 3}', "p")


def report_with(item: dict) -> dict:
    return {"version": "1", "pip_version": "23.0.1", "install": [item]}


WHEEL_ITEM = {"metadata": {"name": "alpha", "version": "1.2.0"},
              "download_info": {"url": "https://example.org/alpha-1.2.0-py3-none-any.whl",
                                "archive_info": {"hash": "sha256=" + "ab" * 32}}}


def test_pip_before_23_gives_the_hash_in_one_field() -> None:
    [wheel] = wheellock.from_pip_report(report_with(WHEEL_ITEM), "r.json")
    assert (wheel.file, wheel.sha256) == ("alpha-1.2.0-py3-none-any.whl", "ab" * 32)


@pytest.mark.parametrize(("report", "said"), [
    ({"version": "2", "install": []}, "field 'version': is '2'; this tool reads pip's installation report version 1"),
    (report_with({**WHEEL_ITEM, "download_info": {"url": "file:///src/alpha", "dir_info": {}}}), "names no wheel"),
    (report_with({**WHEEL_ITEM, "download_info": {"url": "https://e.org/alpha-1.2.0.tar.gz", "archive_info": {}}}),
     "names no wheel"),
    (report_with({**WHEEL_ITEM, "download_info": {"url": "https://e.org/alpha-1.2.0-py3-none-any.whl",
                                                   "archive_info": {"hashes": {"md5": "0" * 32}}}}),
     "field 'hashes': holds no sha256"),
    (report_with({**WHEEL_ITEM, "download_info": {"url": "ftp://e.org/alpha-1.2.0-py3-none-any.whl"}}),
     "is not an http(s) or file URL"),
    (report_with({**WHEEL_ITEM, "metadata": {"name": "alpha\nbeta==1", "version": "1"}}), "field 'name'"),
    ({"version": "1", "install": "alpha"}, "field 'install': must be a list"),
])
def test_a_report_that_locks_no_checkable_file_is_refused_naming_the_field(report: dict, said: str) -> None:
    with pytest.raises(UserError) as refused:
        wheellock.from_pip_report(report, "r.json")
    assert said in str(refused.value) and str(refused.value).startswith("r.json"), str(refused.value)


def test_one_environment_does_not_hold_a_package_from_two_files() -> None:
    first = wheellock.from_pip_report(report_with(WHEEL_ITEM), "a.json")
    other = {**WHEEL_ITEM, "download_info": {"url": "https://e.org/alpha-1.3.0-py3-none-any.whl",
                                             "archive_info": {"hashes": {"sha256": "cd" * 32}}}}
    second = wheellock.from_pip_report(report_with(other), "b.json")
    assert len(wheellock.merged([first, second])) == 2  # two images' locks: each its own version
    with pytest.raises(UserError, match="alpha is installed from two files"):
        wheellock.merged([first, second], one_environment=True)


@pytest.mark.parametrize("text", [
    "alpha==1.2.0\n",  # no hash: pip's hash-checking mode would refuse it
    "alpha==1.2.0 --hash=sha256:" + "AB" * 32 + "  # alpha-1.2.0-py3-none-any.whl from file:///w/a.whl\n",
    "alpha==1.2.0 --hash=sha256:" + "ab" * 32 + "  # not-a-wheel.tar.gz from file:///w/a\n",
    "-e git+https://example.org/alpha\n",
    "",
])
def test_a_lock_line_that_is_not_a_locked_wheel_is_refused_with_exit_2(tmp_path: Path, text: str) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text(text)
    result = build_py("wheels", "check", str(lock), "--wheelhouse", str(tmp_path), "--offline")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert str(lock) in result.stderr and ("is not a locked wheel" in result.stderr or "locks no wheel" in result.stderr)


def test_offline_without_a_wheelhouse_is_refused_before_any_lookup(lock: Path) -> None:
    result = build_py("wheels", "check", str(lock), "--offline")
    assert result.returncode == 2 and "give at least one --wheelhouse" in result.stderr


def fetch(lock: Path, out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return build_py("wheels", "fetch", str(lock), "--out", str(out), *options)


def test_fetch_fills_a_wheelhouse_pip_installs_the_lock_from_offline(lock: Path, wheelhouse: Path,
                                                                      tmp_path: Path) -> None:
    out = tmp_path / "archive"
    result = fetch(lock, out, "--wheelhouse", str(wheelhouse), "--offline")
    assert result.returncode == 0 and f"{out}: 2 of 2 locked wheels" in result.stdout, result.stderr
    wheels = wheellock.read_lock(lock)
    assert sorted(p.name for p in out.iterdir()) == sorted(w.file for w in wheels)
    (out / wheels[0].file).write_bytes(b"not the wheel")  # a file there with other bytes is replaced
    again = fetch(lock, out, "--wheelhouse", str(wheelhouse), "--offline")
    assert again.returncode == 0 and wheellock.sha256_of(out / wheels[0].file) == wheels[0].sha256, again.stderr
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index",
                                "--find-links", str(out), "--require-hashes", "-r", str(lock)],
                               capture_output=True, text=True, timeout=120, check=False)
    assert installed.returncode == 0, installed.stderr


def test_fetch_downloads_from_an_index_and_keeps_only_the_locked_bytes(lock: Path, index: str, tmp_path: Path) -> None:
    served = fetch(lock, tmp_path / "a", "--pip-index-url", index, "--torch-index-url", index)
    assert served.returncode == 0 and "2 of 2" in served.stdout, served.stderr
    wheel = wheellock.read_lock(lock)[0]
    IndexPages.served[wheel.file] = b"other bytes under the listed hash"
    tampered = fetch(lock, tmp_path / "b", "--pip-index-url", index, "--torch-index-url", index)
    assert tampered.returncode == 1 and "1 of 2" in tampered.stdout
    said = hashlib.sha256(b"other bytes under the listed hash").hexdigest()
    assert f"alpha==1.2.0 ({wheel.file}, sha256:{wheel.sha256}) was not fetched" in tampered.stderr
    assert f"sent bytes with sha256:{said}" in tampered.stderr
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [wheellock.read_lock(lock)[1].file]  # nothing half


def test_an_index_that_lists_a_file_on_this_machine_is_not_read(lock: Path, index: str, tmp_path: Path) -> None:
    IndexPages.href = "file:///etc/{file}"
    result = fetch(lock, tmp_path / "a", "--pip-index-url", index, "--torch-index-url", index)
    assert result.returncode == 1 and "not an http(s) URL" in result.stderr, result.stderr
    assert not list((tmp_path / "a").iterdir())
