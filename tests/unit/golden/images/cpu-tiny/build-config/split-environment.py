"""The torch layer in pieces (macros.j2: torch_layer): the environment's files hard-linked into one folder per piece,
each laid out as the image is, so the final stage copies each piece to / as a layer of its own and a pull fetches
them side by side (issue 52).

    python -S split-environment.py OUT PIECE[,PIECE...] GID VENV [ROOT ...]

Every file and link under VENV (/opt/venv) and the ROOTs (/opt/python, /etc/pip) goes to exactly one piece, OUT/PIECE:
- a piece named as a distribution (torch, triton) takes the files that distribution's RECORD lists;
- pieces named nvidia-1, nvidia-2, ... share the CUDA libraries' distributions (nvidia-*, cuda-*), each distribution
  whole in one piece, the largest first into the piece that holds the fewest bytes so far (the same wheels always give
  the same pieces);
- the last piece takes the rest: the other distributions, the venv itself, /opt/python, /etc/pip.
A file several RECORDs list (the `nvidia/__init__.py` every CUDA wheel carries) goes to the first of their pieces. Each
piece holds the folders above its files, with their owner, mode and times; a folder with no file under it goes to the
last piece. What is under VENV (and VENV itself) is given owner root and group GID, the user's group, which may then
install into the environment. Stdlib only, and no site-packages (-S): it runs on the build's Python, whatever it is.
"""

from __future__ import annotations

import csv
import os
import re
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

CUDA_LIBRARY = re.compile(r"^(nvidia|cuda)-")
SHARED_PIECE = re.compile(r"nvidia-[0-9]+")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions(site: Path) -> dict[str, list[Path]]:
    """Each distribution in `site` (canonical name) -> the absolute paths its RECORD lists."""
    listed = {}
    for record in sorted(site.glob("*.dist-info/RECORD")):
        name = canonical(record.parent.name[: -len(".dist-info")].rsplit("-", 1)[0])
        with record.open(newline="", encoding="utf-8") as rows:
            listed[name] = sorted({Path(os.path.normpath(site / row[0])) for row in csv.reader(rows) if row})
    return listed


def size_of(paths: Iterator[Path] | list[Path]) -> int:
    return sum(path.lstat().st_size for path in paths if path.is_symlink() or path.exists())


def piece_of_each_distribution(listed: dict[str, list[Path]], pieces: list[str]) -> dict[str, int]:
    """Distribution -> the index of its piece (the last piece takes what no rule names)."""
    rest = len(pieces) - 1
    chosen = {name: pieces.index(name) for name in listed if name in pieces[:rest]}
    shared = [index for index, piece in enumerate(pieces[:rest]) if SHARED_PIECE.fullmatch(piece)]
    if shared:
        held = dict.fromkeys(shared, 0)
        libraries = [(size_of(paths), name) for name, paths in listed.items() if CUDA_LIBRARY.match(name) and name not in chosen]
        for size, name in sorted(libraries, key=lambda pair: (-pair[0], pair[1])):
            index = min(shared, key=lambda i: (held[i], i))
            chosen[name], held[index] = index, held[index] + size
    return {name: chosen.get(name, rest) for name in listed}


def piece_of_each_file(site: Path, pieces: list[str]) -> dict[Path, int]:
    listed = distributions(site)
    piece = piece_of_each_distribution(listed, pieces)
    claims: dict[Path, int] = {}
    for name, paths in listed.items():
        for path in paths:
            claims[path] = min(claims.get(path, piece[name]), piece[name])
    return claims


def walk(roots: list[Path]) -> tuple[list[Path], list[Path]]:
    """Every folder and every non-folder under the roots, each list sorted."""
    folders, entries = [], []
    for root in roots:
        for top, dirs, files in os.walk(root):
            dirs.sort()
            folders.append(Path(top))
            entries += [Path(top, name) for name in files]
            # a link to a folder is an entry of its own, not walked into
            entries += [Path(top, name) for name in dirs if Path(top, name).is_symlink()]
    return folders, sorted(entries)


def copy_metadata(source: Path, target: Path, group: int | None = None) -> None:
    """`source`'s owner, mode and times onto `target` (owner root and `group` instead, where given)."""
    info = source.lstat()
    os.lchown(target, *((info.st_uid, info.st_gid) if group is None else (0, group)))
    if not stat.S_ISLNK(info.st_mode):
        target.chmod(stat.S_IMODE(info.st_mode))
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns), follow_symlinks=False)


def split(out: Path, pieces: list[str], group: int, roots: list[Path]) -> None:
    [site] = [path for root in roots for path in root.glob("lib/python*/site-packages")]
    claims = piece_of_each_file(site, pieces)
    folders, entries = walk(roots)
    rest = len(pieces) - 1
    placed = [(path, claims.get(path, rest)) for path in entries]
    needed = {(folder, index) for path, index in placed for folder in path.parents}
    filled = {folder for folder, _ in needed}
    for folder in folders:
        if folder not in filled:
            needed |= {(above, rest) for above in (folder, *folder.parents)}
    venv = roots[0]

    def group_of(path: Path) -> int | None:
        return group if path == venv or venv in path.parents else None

    def target(path: Path, index: int) -> Path:
        return out / pieces[index] / path.relative_to(path.anchor)

    for piece in pieces:
        (out / piece).mkdir(parents=True)
    for folder, index in sorted(needed, key=lambda pair: (len(pair[0].parts), pair)):
        target(folder, index).mkdir(exist_ok=True)
    for path, index in placed:
        if path.is_symlink():
            target(path, index).symlink_to(path.readlink())
            copy_metadata(path, target(path, index), group_of(path))
        else:
            os.link(path, target(path, index))  # Path.hardlink_to is Python 3.10's; an entry may ask 3.9
            if group_of(path) is not None:  # the same file: its owner is given through either name
                os.lchown(path, 0, group)
    # owner, mode and times last: making what a folder holds changed its times
    for folder, index in needed:
        copy_metadata(folder, target(folder, index), group_of(folder))
    for index, piece in enumerate(pieces):
        mine = [path for path, i in placed if i == index]
        print(f"piece {index + 1} of {len(pieces)}, {piece}: {len(mine)} files, {size_of(mine) / 1e6:.1f} MB")


def main(argv: list[str]) -> None:
    if len(argv) < 5 or not argv[3].isdigit():
        sys.exit(__doc__)
    split(Path(argv[1]), argv[2].split(","), int(argv[3]), [Path(root).absolute() for root in argv[4:]])


if __name__ == "__main__":
    main(sys.argv)
