"""compat refresh on recorded index pages (tests/data/indexes, made by its record.py): what the indexes say
about torch, how `compat refresh` writes it over the data, and the per-axis wheel check `validate` makes with it."""

from __future__ import annotations

import contextlib
import copy
import http.server
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from torchimages.errors import UserError
from torchimages.input import compat, indexes, matrix, specs
from torchimages.input import refresh as compatrefresh

from ..conftest import ROOT, AnsweringHandler

RECORDED = ROOT / "tests" / "data" / "indexes"
sys.path.insert(0, str(RECORDED))
from record import local_path  # noqa: E402

DATA = ROOT / "torchimages" / "data" / "compat.yaml"


def recorded(url: str, accept: str) -> bytes | None:
    path = local_path(url)
    return path.read_bytes() if path.is_file() else None


@pytest.fixture(scope="module")
def releases() -> dict[str, indexes.Release]:
    found = indexes.pypi_releases(recorded, since="2.0")
    indexes.wheel_index_builds(recorded, found, ["cu118", "cu121", "cu126", "cu130", "cu999"])
    return found


@pytest.mark.parametrize(("filename", "expected"), [
    ("torch-2.3.1-cp311-cp311-manylinux1_x86_64.whl", ("2.3.1", "", "3.11", "x86_64")),
    ("torch-2.3.1%2Bcu121-cp312-cp312-linux_x86_64.whl", ("2.3.1", "cu121", "3.12", "x86_64")),
    ("torch-2.9.0-cp313-cp313t-manylinux_2_28_aarch64.whl", ("2.9.0", "", "3.13t", "aarch64")),
    ("torch-2.3.1-cp311-cp311-win_amd64.whl", None),
    ("torch-2.3.1-cp311-none-macosx_11_0_arm64.whl", None),
    ("torchvision-0.18.1-cp311-cp311-manylinux1_x86_64.whl", None),
])
def test_wheel_file_names(filename: str, expected: tuple | None) -> None:
    wheel = indexes.parse_wheel(filename, "u")
    assert (None if wheel is None else (wheel.version, wheel.local, wheel.python, wheel.platform)) == expected


def test_pypi_gives_python_platforms_and_the_default_builds_pins(releases: dict[str, indexes.Release]) -> None:
    assert sorted(releases, key=indexes.version_key)[0] == "2.0.0" and "1.13.1" not in releases
    old, new = releases["2.3.1"], releases["2.13.0"]
    assert sorted(old.python) == ["3.10", "3.11", "3.12", "3.8", "3.9"] and old.platforms == {"x86_64", "aarch64"}
    assert (old.default_cuda, old.cudnn, old.nccl) == ("12.1", "8.9.2.26", "2.20.5")  # nvidia-*-cu12 pins
    assert (new.default_cuda, new.cudnn, new.nccl) == ("13.0", "9.20.0.48", "2.29.7")  # cuda-toolkit[...]==13.0.3
    assert "3.14t" in new.python
    assert releases["2.1.1"].metadata_source.endswith("cp310-cp310-manylinux1_x86_64.whl.metadata"), \
        "the cp311 wheel of 2.1.1 has no metadata file: the next wheel's is read"
    assert releases["2.15.0"].default_cuda is None and releases["2.15.0"].metadata_source is None


def test_the_wheel_indexes_give_each_builds_python(releases: dict[str, indexes.Release]) -> None:
    python, platforms = releases["2.3.1"].builds["cu118"]
    assert sorted(python, key=indexes.version_key) == ["3.8", "3.9", "3.10", "3.11", "3.12"] and platforms == {"x86_64"}
    assert "cu130" not in releases["2.3.1"].builds and "cu130" in releases["2.13.0"].builds
    assert not any("cu999" in r.builds for r in releases.values()), "a variant without a page has no builds"


def refreshed(releases: dict[str, indexes.Release], data: dict | None = None) -> compatrefresh.Refresh:
    return compatrefresh.apply(copy.deepcopy(data or yaml.safe_load(DATA.read_text())), copy.deepcopy(releases),
                               ["cu118", "cu121", "cu126", "cu130"])


def test_refresh_writes_what_the_indexes_say_with_its_source(releases: dict[str, indexes.Release]) -> None:
    data = yaml.safe_load(DATA.read_text())
    row = next(r for r in data["torch"] if r["version"] == "2.3.1")
    row["python"] = ["3.8"]  # the data is behind
    default = next(b for b in row["builds"] if b["default"])
    default["nccl"] = "2.19.3"
    result = refreshed(releases, data)
    new_row = next(r for r in result.data["torch"] if r["version"] == "2.3.1")
    assert new_row["python"] == ["3.8", "3.9", "3.10", "3.11", "3.12"]
    build = next(b for b in new_row["builds"] if b["default"])
    assert build["variant"] == "cu121" and build["nccl"] == "2.20.5" and build["sources"]["nccl"] == ["PYPI_INDEX"]
    # PyPI lists an aarch64 wheel of 2.3.1 too, but its CUDA pins hold on x86_64 only: that wheel is a CPU build
    assert build["wheels"] == {"python": ["3.8", "3.9", "3.10", "3.11", "3.12"], "platforms": ["x86_64"],
                               "sources": ["PYPI_INDEX", "WHL_INDEX"]}
    assert "torch 2.3.1: Python wheels ['3.8'] -> ['3.8', '3.9', '3.10', '3.11', '3.12']" in result.changes
    assert "torch 2.3.1 cu121: nccl 2.19.3 -> 2.20.5" in result.changes
    assert "PYPI_INDEX" in result.data["sources"] and "WHL_INDEX" in result.data["sources"]


@pytest.mark.parametrize(("version", "cuda_platforms"), [
    ("2.3.1", {"x86_64"}),    # nvidia-cuda-runtime-cu12 ... platform_machine == "x86_64": the aarch64 wheel is CPU
    ("2.10.0", {"x86_64"}),   # the same marker, the last release with it (its aarch64 wheel: 146 MB)
    ("2.11.0", {"aarch64", "x86_64"}),  # cuda-toolkit[...] ... platform_system == "Linux": CUDA on both (419 MB)
    ("2.14.0", {"aarch64", "x86_64"}),
])
def test_the_default_build_is_cuda_only_where_its_pins_hold(releases: dict[str, indexes.Release], version: str,
                                                              cuda_platforms: set[str]) -> None:
    release = releases[version]
    assert release.platforms == {"aarch64", "x86_64"}, "PyPI has wheels for both"
    assert release.cuda_platforms == cuda_platforms
    row = next(r for r in refreshed(releases).data["torch"] if r["version"] == version)
    assert set(next(b for b in row["builds"] if b["default"])["wheels"]["platforms"]) == cuda_platforms


@pytest.mark.parametrize(("marker", "platform", "holds"), [
    ('platform_system == "Linux" and platform_machine == "x86_64"', "aarch64", False),
    ('platform_system == "Linux" and platform_machine == "x86_64"', "x86_64", True),
    ('platform_system == "Linux"', "aarch64", True),
    ('platform_machine != "aarch64"', "aarch64", False),
    ("", "aarch64", True),
])
def test_a_pin_holds_where_its_marker_does(marker: str, platform: str, holds: bool) -> None:
    assert indexes.holds_on(marker, platform) is holds


def test_a_marker_that_is_not_one_is_refused() -> None:
    with pytest.raises(indexes.IndexRefused, match="is not a requirement marker"):
        indexes.holds_on('platform_machine = "x86_64" or', "x86_64")


def test_a_new_release_and_build_get_rows_marked_unconfirmed(releases: dict[str, indexes.Release]) -> None:
    data = yaml.safe_load(DATA.read_text())
    data["torch"] = [r for r in data["torch"] if r["version"] != "2.13.0"]
    for row in data["torch"]:
        if row["version"] == "2.12.1":
            row["builds"] = [b for b in row["builds"] if b["variant"] != "cu126"]
    result = refreshed(releases, data)
    versions = [r["version"] for r in result.data["torch"]]
    assert versions == sorted(versions, key=indexes.version_key) and "2.13.0" in versions
    row = next(r for r in result.data["torch"] if r["version"] == "2.13.0")
    default = next(b for b in row["builds"] if b["default"])
    assert (default["variant"], default["cudnn"], default["nccl"]) == ("cu130", "9.20.0.48", "2.29.7")
    assert default["unconfirmed"] == ["archs"], "the pins came from the index; the archs did not"
    assert row["torchvision"] is None
    assert "torch 2.13.0: new release (torchvision, torchaudio and GPU archs to be added by hand)" in result.changes
    readded = next(b for b in next(r for r in result.data["torch"] if r["version"] == "2.12.1")["builds"]
                   if b["variant"] == "cu126")
    assert readded["unconfirmed"] == ["cudnn", "nccl", "archs"] and readded["sources"]["build"] == ["WHL_INDEX"]
    assert compat.parse(result.data).torch_release("2.13.0").build_for("13.0").python  # it loads and is usable


def test_refresh_of_current_data_is_a_fixed_point(releases: dict[str, indexes.Release]) -> None:
    once = refreshed(releases)
    twice = refreshed(releases, once.data)
    assert twice.changes == [] and twice.data == once.data


def test_refresh_never_deletes_and_keeps_the_hand_kept_parts(releases: dict[str, indexes.Release]) -> None:
    before = yaml.safe_load(DATA.read_text())
    after = refreshed(releases).data
    for key in ("ngc", "cuda_min_driver", "cuda_image_tags", "os_python"):
        assert after[key] == before[key]
    for old in before["torch"]:
        new = next(r for r in after["torch"] if r["version"] == old["version"])
        assert {b["variant"] for b in old["builds"]} <= {b["variant"] for b in new["builds"]}
        assert (new["torchvision"], new["torchaudio"]) == (old["torchvision"], old["torchaudio"])
        for build in old["builds"]:
            assert next(b for b in new["builds"] if b["variant"] == build["variant"])["archs"] == build["archs"]


def test_check_exits_1_when_behind_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "compat.yaml"
    shutil.copy(DATA, path)
    text = path.read_text()
    behind = text.replace("\n  - 3.13t\n", "\n", 1)
    assert behind != text
    path.write_text(behind)
    result = compatrefresh.run(since="2.0", check=True, pypi_index=indexes.PYPI_SIMPLE, wheel_index=None,
                               fetch=recorded, path=path)
    assert result.diff.count("\n+  - 3.13t") == 1 and path.read_text() == behind
    written = compatrefresh.run(since="2.0", check=False, pypi_index=indexes.PYPI_SIMPLE, wheel_index=None,
                                fetch=recorded, path=path)
    assert written.diff == result.diff and path.read_text() == text, "the refresh restores what the index says"
    assert (tmp_path / "compat.json").is_file()


def test_refresh_reads_the_wheel_index_of_each_cuda_of_the_driver_table(tmp_path: Path) -> None:
    """A CUDA line gets its driver row by hand; the refresh then reads its wheel index and adds its builds, CUDA 11's
    as well: the data below has lost every cu118 build, and the refresh finds them again."""
    data = yaml.safe_load(DATA.read_text())
    for row in data["torch"]:
        row["builds"] = [b for b in row["builds"] if b["variant"] != "cu118"]
    path = tmp_path / "compat.yaml"
    path.write_text(compatrefresh.dump(data, compatrefresh.header_of(DATA.read_text())))
    asked: list[str] = []

    def fetch(url: str, accept: str) -> bytes | None:
        asked.append(url)
        return recorded(url, accept)

    result = compatrefresh.run(since="2.0", check=True, pypi_index=indexes.PYPI_SIMPLE,
                               wheel_index=indexes.WHEEL_INDEX, fetch=fetch, path=path)
    assert f"{indexes.WHEEL_INDEX}/cu118/torch/" in asked and f"{indexes.WHEEL_INDEX}/cu117/torch/" in asked
    assert "torch 2.3.1 cu118: new CUDA build" in result.changes and "torch 2.0.1 cu118: new CUDA build" in result.changes
    assert "+  - variant: cu118" in result.diff


def test_an_unreadable_index_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"lists no torch release from 9.0 on"):
        compatrefresh.run(since="9.0", check=True, pypi_index=indexes.PYPI_SIMPLE, wheel_index=None, fetch=recorded,
                          path=DATA)
    with pytest.raises(UserError, match=r"could not read the indexes \(LookupError: https://x.invalid/: no such page\)"):
        compatrefresh.run(since="2.0", check=True, pypi_index="https://x.invalid/", wheel_index=None, fetch=recorded,
                          path=DATA)


def plan_with(entry: str) -> str:
    try:
        specs.resolve(matrix.loads(f"registry: r.example.com/ml/t\nimages:\n  - {entry}\n", "m.yaml"))
    except UserError as exc:
        return str(exc)
    return ""


def test_validate_proves_a_wheel_per_build_python_and_platform() -> None:
    assert plan_with('{flavor: cuda, torch: "2.9.0", cuda: "12.8", python: "3.13t"}') == ""  # PyPI lists it
    message = plan_with('{flavor: cuda, torch: "2.14.0", cuda: "13.0", python: "3.9"}')
    assert "torch 2.14.0 cu130 has no wheel for Python 3.9 on x86_64" in message
    assert "nearest that exist: Python 3.12, 3.13, 3.14 with torch 2.14.0 cu130" in message, message


def test_the_cli_refuses_a_bad_since() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "build.py"), "compat", "refresh", "--since", "x;y", "--check"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2 and "--since 'x;y' is not a version" in result.stderr and "Traceback" not in result.stderr


def test_a_builds_own_wheel_list_decides_over_the_releases() -> None:
    """Where an index listed a build's wheels, that list decides: the release may have Python 3.12 wheels while this
    build has none, and a build with only aarch64 wheels cannot make an x86_64 image."""
    raw = yaml.safe_load(DATA.read_text())
    row = next(r for r in raw["torch"] if r["version"] == "2.3.1")
    cu118 = next(b for b in row["builds"] if b["variant"] == "cu118")
    cu118["wheels"] = {"python": ["3.8", "3.9", "3.10", "3.11"], "platforms": ["x86_64"], "sources": ["WHL_INDEX"]}
    data = compat.parse(raw)
    entry = 'registry: r.example.com/ml/t\nimages:\n  - {flavor: cuda, torch: "2.3.1", cuda: "11.8", python: "%s"}\n'
    with pytest.raises(UserError) as refused:
        specs.resolve(matrix.loads(entry % "3.12", "m.yaml"), data)
    assert "torch 2.3.1 cu118 has no wheel for Python 3.12 on x86_64" in str(refused.value)
    assert "nearest that exist: Python 3.9, 3.10, 3.11 with torch 2.3.1 cu118;" in str(refused.value)
    assert "torch 2.3.1 cu121 with Python 3.12" in str(refused.value)
    specs.resolve(matrix.loads(entry % "3.11", "m.yaml"), data)
    cu118["wheels"]["platforms"] = ["aarch64"]
    with pytest.raises(UserError, match=r"cu118 has no wheel for Python 3\.11 on x86_64"):
        specs.resolve(matrix.loads(entry % "3.11", "m.yaml"), compat.parse(raw))


def hostile(url_part: str, old: bytes, new: bytes) -> indexes.Fetch:
    """The recorded indexes, with `old` replaced by `new` in the pages whose URL holds `url_part`."""
    def fetch(url: str, accept: str) -> bytes | None:
        body = recorded(url, accept)
        return body.replace(old, new) if body is not None and url_part in url else body
    return fetch


@pytest.mark.parametrize(("fetch", "words"), [
    (hostile("simple/torch", b"torch-2.3.1-cp311-cp311-manylinux1_x86_64.whl",
             b"torch-2.3.1-cp399999-cp399999-manylinux1_x86_64.whl"), "cp399999"),
    (hostile("simple/torch", b"torch-2.3.1-cp311-cp311-manylinux1_x86_64.whl",
             b"torch-02.03.01-cp311-cp311-manylinux1_x86_64.whl"), "02.03.01"),
    (hostile(".metadata", b"nvidia-cudnn-cu12 (==8.9.2.26)", b"nvidia-cudnn-cu12 (==8.9.2.26+evil)"),
     "pins nvidia-cudnn-cu12==8.9.2.26+evil"),
    (hostile("/whl/cu121/", b"torch-2.3.1+cu121-cp311-cp311-linux_x86_64.whl",
             b"torch-2.3.01+cu121-cp311-cp311-linux_x86_64.whl"), "2.3.01+cu121"),
])
def test_a_hostile_index_changes_nothing_and_says_why(tmp_path: Path, fetch: indexes.Fetch, words: str) -> None:
    data = tmp_path / "compat.yaml"
    shutil.copy(DATA, data)
    before = data.read_bytes()
    with pytest.raises(UserError, match="could not read the indexes \\(IndexRefused: ") as caught:
        compatrefresh.run(since="2.0", check=False, pypi_index=indexes.PYPI_SIMPLE, wheel_index=indexes.WHEEL_INDEX,
                          fetch=fetch, path=data)
    assert words in str(caught.value) and data.read_bytes() == before


def test_a_mirror_is_the_only_index_asked(tmp_path: Path) -> None:
    """Without a wheel's metadata file the pins come from pypi.org's JSON, but only for pypi.org's own files."""
    asked: list[str] = []
    mirror = "https://mirror.example.com/simple/torch/"

    def fetch(url: str, accept: str) -> bytes | None:
        asked.append(url)
        if url == mirror:
            return recorded(indexes.PYPI_SIMPLE, accept).replace(b"https://files.pythonhosted.org/",
                                                                  b"https://mirror.example.com/files/")
        return None  # the mirror has no metadata files

    releases = indexes.pypi_releases(fetch, since="2.13", index=mirror)
    assert releases and all(url.startswith("https://mirror.example.com/") for url in asked), asked
    assert all(release.cudnn is None for release in releases.values())


class Trickle(AnsweringHandler):
    """A mirror that sends its page a byte at a time, never timing out a single read."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        with contextlib.suppress(OSError):
            for _ in range(1000):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.2)


def test_a_trickling_mirror_is_cut_off_at_the_deadline() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        fetch = indexes.http_fetch(timeout=1.5, deadline=30)
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="not read within 2 s"):
            fetch(f"http://127.0.0.1:{server.server_port}/simple/torch/", "*/*")
        assert time.monotonic() - started < 5
        spent = indexes.http_fetch(timeout=30, deadline=0)
        with pytest.raises(TimeoutError, match="more than 0 s in all"):
            spent(f"http://127.0.0.1:{server.server_port}/simple/torch/", "*/*")
    finally:
        server.shutdown()
