"""The GPU code an ELF shared object carries, read from its .nv_fatbin section: [(kind, sm)], kind "sass" or "ptx".
cuobjdump is not on PyPI; the layout (reverse-engineered, stable since CUDA 10): each fat binary is a 16-byte header
(magic 0xBA55ED50, u16 version, u16 header size, u64 size) and its entries, each with its kind (u16: 1 PTX, 2 ELF),
its header size (u32 at +4), its payload size (u64 at +8) and its sm (u32 at +28)."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

MAGIC = 0xBA55ED50
KINDS = {1: "ptx", 2: "sass"}


def section(path: str, wanted: bytes = b".nv_fatbin") -> bytes:
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError(f"{path} is not a 64-bit ELF file")
    (table,) = struct.unpack_from("<Q", data, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", data, 0x3A)

    def header(index: int) -> tuple[int, ...]:
        return struct.unpack_from("<IIQQQQIIQQ", data, table + index * entry_size)

    names = header(names_index)[4]
    for index in range(count):
        name, _kind, _flags, _address, offset, size, *_ = header(index)
        if data[names + name:].split(b"\0", 1)[0] == wanted:
            return data[offset:offset + size]
    return b""


def archs(blob: bytes) -> list[tuple[str, int]]:
    found: set[tuple[str, int]] = set()
    at = 0
    while at + 16 <= len(blob):
        magic, _version, header_size, size = struct.unpack_from("<IHHQ", blob, at)
        if magic != MAGIC:
            at += 8  # fat binaries are 8-byte aligned in the section
            continue
        entry, end = at + header_size, at + header_size + size
        while entry < end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", blob, entry)
            (sm,) = struct.unpack_from("<I", blob, entry + 28)
            found.add((KINDS.get(kind, str(kind)), sm))
            entry += entry_header + payload
        at = end
    return sorted(found)


if __name__ == "__main__":
    print(archs(section(sys.argv[1])))
