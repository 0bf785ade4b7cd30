"""A fuzz test per reader of what the release path reads. A release manifest, a build report, the
lock file and the extra compat rows, each a valid file with one value anywhere in it replaced by something hostile
(shell and Markdown pieces, control characters, paths, wrong types, deep nesting), is read or refused with one
UserError line naming the file; never another exception, never a value outside its grammar let through."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchimages import manifest
from torchimages.errors import UserError
from torchimages.input import compat, lock
from torchimages.input.grammar import DIGEST
from torchimages.report import Report

from .hostile import hostile
from .release_files import candidates, pushed_record

values = st.recursive(st.none() | st.booleans() | st.integers(-2, 2**40) | st.floats(allow_nan=True) | hostile,
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile, inner, max_size=3),
                      max_leaves=8)


def paths_of(data: object, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON value: keys of objects and indexes of lists."""
    found = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            found += paths_of(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += paths_of(value, (*prefix, index))
    return found


def replaced(data: object, path: tuple, value: object) -> object:
    copy = json.loads(json.dumps(data))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return copy


def read_or_refuse(path: Path, read: Callable[[Path], object]) -> object | None:
    """What `read` made of the file, or None when it refused it with one line naming the file."""
    try:
        return read(path)
    except UserError as exc:
        message = str(exc)
        assert "\n" not in message and str(path) in message, message
        return None


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(choice=st.integers(min_value=0), value=values)
def test_a_manifest_with_any_value_replaced_is_read_or_refused(choice: int, value: object) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        data = candidates(folder)
        places = paths_of(data)
        path = folder / "c.json"
        path.write_text(json.dumps(replaced(data, places[choice % len(places)], value)))
        read = read_or_refuse(path, manifest.read)
        if read is not None:  # accepted: every value the release path uses is inside its grammar
            for item in read.images:
                assert DIGEST.fullmatch(item.digest) and "/" not in item.image and ".." not in item.image
                assert read.reference(item) == f"{read.repository}@{item.digest}"
                if item.sbom:
                    assert item.sbom.file.resolve().is_relative_to(folder.resolve())


@FUZZ
@given(choice=st.integers(min_value=0), value=values)
def test_a_report_with_any_value_replaced_is_read_or_refused(choice: int, value: object) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.json"
        Report("v2.7", "matrix.yaml", images=[pushed_record()]).write(path)
        data = json.loads(path.read_text())
        places = paths_of(data)
        path.write_text(json.dumps(replaced(data, places[choice % len(places)], value)))
        read_or_refuse(path, Report.load)


PIN = {"digest": "sha256:" + "a" * 64, "locked_at": "2026-12-02T00:00:00Z",
       "source": "https://registry-1.docker.io/v2/library/debian/manifests/bookworm-slim"}


@FUZZ
@given(choice=st.integers(min_value=0), value=values)
def test_a_lock_file_with_any_value_replaced_is_read_or_refused(choice: int, value: object) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "matrix.lock"
        data = {"comment": "c", "pins": {"debian:bookworm-slim": PIN}}
        places = paths_of(data)
        path.write_text(json.dumps(replaced(data, places[choice % len(places)], value)))
        read = read_or_refuse(path, lock.LockFile.load)
        if read is not None:
            assert all(DIGEST.fullmatch(pin.digest) for pin in read.pins.values())


ROW = {"release": "test", "image": "torchimages/ngc-shaped:test", "pytorch": "2.3.1+cu121", "cuda": "12.1.1",
       "cudnn": "8.9.2.26", "nccl": "2.20.5", "python": "3.11", "sources": ["x"]}


@FUZZ
@given(choice=st.integers(min_value=0), value=values)
def test_extra_compat_rows_with_any_value_replaced_are_read_or_refused(choice: int, value: object) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "extra.yaml"
        data = {"ngc": [ROW]}
        places = paths_of(data)
        path.write_text(json.dumps(replaced(data, places[choice % len(places)], value)))  # JSON is YAML
        try:
            rows = compat.extra_ngc_rows(path)
        except UserError as exc:
            assert "\n" not in str(exc) and str(path) in str(exc), str(exc)
            return
        for row in rows:
            assert all(isinstance(row[key], str) and "\n" not in row[key] for key in ("image", "release", "cudnn"))
