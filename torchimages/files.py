"""Files in and out: JSON read from outside with limits, paths a file names beside itself, and where output may go.

Every file this tool writes goes through `atomic_write` (readers see the old file or the new one) after its path was
checked by `output_file_problem` or `output_folder_problem`: an output is a regular file, a folder or a new path,
never a link, a device, a FIFO or a socket, and never under /dev, /proc or /sys (`--out /dev/stdout` as root would
otherwise replace the device with a file and put its siblings into /dev). A folder made beside an output (the SBOMs of
a manifest, MANIFEST.sbom/) is made in the output's own folder, and one that is a link is refused, so nothing is
written where a link points.
"""

from __future__ import annotations

import hashlib
import json
import stat
import tempfile
from pathlib import Path

from .errors import UserError, visible
from .input.grammar import relative_path_problem

MAX_BYTES = 64 << 20  # no file this tool writes comes near; a bigger one is not read into memory
THROUGH_LINK = " (nothing is written through a link)"
SYSTEM_FOLDERS = (Path("/dev"), Path("/proc"), Path("/sys"))  # pseudo-filesystems: nothing this tool writes goes there
KINDS = {stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device", stat.S_ISFIFO: "a FIFO",
         stat.S_ISSOCK: "a socket", stat.S_ISLNK: "a link"}


def load(path: Path, what: str) -> object:
    """The JSON value `path` holds; a missing, unreadable, oversized, non-UTF-8 or non-JSON file is one UserError."""
    try:
        found = path.stat()  # through a link: reading one is fine
        if stat.S_ISDIR(found.st_mode):
            raise UserError(f"{path}: is a folder, not {what}")
        if not stat.S_ISREG(found.st_mode):  # a FIFO would block, a device never end
            raise UserError(f"{path}: is a device, FIFO or socket, not {what}")
        size = found.st_size
        if size > MAX_BYTES:
            raise UserError(f"{path}: {size} bytes is too big for {what} (at most {MAX_BYTES})")
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"{path}: {what} could not be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not {what} (not UTF-8 text)") from None
    except RecursionError:
        raise UserError(f"{path}: not {what} (nested too deeply)") from None
    except ValueError as exc:
        raise UserError(f"{path}: not {what} (not JSON: {exc})") from None


def sha256_of(path: Path) -> str:
    """The sha256 of a file's bytes, read a MiB at a time (wheels are GBs)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def contained(folder: Path, relative: str) -> Path | None:
    """`folder / relative` when it stays inside `folder` once every link is followed, else None."""
    if relative_path_problem(relative):
        return None
    path = folder / relative
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return None
    return path


def kind_of_path(path: Path) -> str | None:
    """What stands at `path` when it is neither a regular file nor a folder (a link counts, whatever it points at)."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return None
    return next((kind for test, kind in KINDS.items() if test(mode)), None)


def in_system_folder(path: Path) -> Path | None:
    """The pseudo-filesystem `path` lies under, once its folder's links are followed."""
    try:
        resolved = path.parent.resolve() / path.name
    except (OSError, RuntimeError):
        resolved = path.absolute()
    return next((folder for folder in SYSTEM_FOLDERS if folder == resolved or folder in resolved.parents), None)


def output_file_problem(path: Path) -> str | None:
    """Why `path` may not be written as a file (one line), or None: it must be a regular file or a new path whose
    nearest existing folder is a folder."""
    if system := in_system_folder(path):
        return f"is under {system}; give the path of a regular file to write (e.g. releases/v2.7.json)"
    kind = kind_of_path(path)
    if kind:
        return f"is {kind}; give the path of a regular file or a new one{THROUGH_LINK if kind == 'a link' else ''}"
    if path.is_dir():
        return "is a folder; give the path of the file to write"
    return parent_problem(path)


def output_folder_problem(path: Path) -> str | None:
    """Why `path` may not be written as a folder (logs, rendered contexts), or None: a folder or a new path, not a link."""
    if system := in_system_folder(path):
        return f"is under {system}; give a folder of your own"
    kind = kind_of_path(path)
    if kind:
        return f"is {kind}; give a folder or a new path{THROUGH_LINK if kind == 'a link' else ''}"
    if path.exists() and not path.is_dir():
        return "is a file, not a folder"
    return parent_problem(path)


def parent_problem(path: Path) -> str | None:
    existing = next((p for p in path.absolute().parents if p.exists()), None)
    if existing is not None and not existing.is_dir():
        return f"{existing} is a file, not a folder"
    return None


def check_output_file(path: Path, option: str) -> Path:
    if why := output_file_problem(path):
        raise UserError(f"{option} {visible(str(path))}: {why}")
    return path


def check_output_folder(path: Path, option: str) -> Path:
    if why := output_folder_problem(path):
        raise UserError(f"{option} {visible(str(path))}: {why}")
    return path


def beside(path: Path, name: str, option: str) -> Path:
    """A folder made beside the output `path` (its SBOMs): in the output's own folder, never a link."""
    folder = path.parent / name
    if why := output_folder_problem(folder):
        raise UserError(f"{option} {visible(str(path))}: {visible(str(folder))} beside it {why}")
    return folder


def atomic_write(path: Path, content: str | bytes) -> None:
    """Write through a temporary sibling, so readers see the old file or the new one; the temporary file never stays.
    Refuses a path that is not a regular file or a new one (output_file_problem)."""
    if why := output_file_problem(path):
        raise UserError(f"{visible(str(path))}: {why}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("wb", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        temporary = Path(tmp.name)
    try:
        temporary.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)
