"""An image's size against its floor: the OS base image plus what was installed on it, each file counted once.

Docker's image size adds up layers, so a file written in one layer and changed in a later one counts
twice; the floor is what the image would weigh without such waste. It is measured in the image:
dpkg's installed sizes over those of the OS base, plus the files under the Python environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..containers import Containers
from ..engine import ENGINE_ERRORS, Engine

# The folders a wheel image installs Python into (du counts hard links once).
PYTHON_FOLDERS = ("/opt/venv", "/opt/python", "/etc/pip")
MEASURE = ("dpkg-query -W -f='${Installed-Size}\\n' | awk '{s+=$1} END {printf \"%.0f\\n\", s*1024}'; "
           f"du -sb {' '.join(PYTHON_FOLDERS)} 2>/dev/null | awk '{{s+=$1}} END {{printf \"%.0f\\n\", s}}'")


@dataclass
class FloorMeter:
    """Measures floors; each OS base image is measured once."""

    engine: Engine
    known: dict[str, int] = field(default_factory=dict)  # image id -> floor measured before
    _os: dict[str, tuple[int | None, int]] = field(default_factory=dict)

    def floor(self, image: str, os_base: str, *, image_id: str | None = None) -> int | None:
        """Bytes of `os_base` plus what `image` installed on it; None when either cannot be measured."""
        if image_id in self.known:
            return self.known[image_id]
        try:
            if os_base not in self._os:
                self._os[os_base] = (self.engine.image_size(os_base), self._measure(os_base)[0])
            base_size, base_dpkg = self._os[os_base]
            dpkg, python = self._measure(image)
        except (*ENGINE_ERRORS, ValueError, RuntimeError):
            return None
        if base_size is None:  # its layers could not be counted (torchimages.unpacked)
            return None
        return floor_bytes(base_size, base_dpkg, dpkg, python)

    def _measure(self, image: str) -> tuple[int, int]:
        """(dpkg's installed bytes, bytes under PYTHON_FOLDERS) in a container of `image`, run as root."""
        code, output = Containers(self.engine).run_once(image, entrypoint=["/bin/sh", "-c"], command=[MEASURE],
                                                        user="0", stderr=False)
        if code != 0:
            raise RuntimeError(f"the measurement exited {code}: {output[-300:]}")
        return measured(output)


def floor_bytes(base_size: int, base_dpkg: int, dpkg: int, python: int) -> int:
    """The OS base as stored, plus what dpkg installed over it, plus the Python environment: each file once."""
    return base_size + (dpkg - base_dpkg) + python


def measured(output: str) -> tuple[int, int]:
    """MEASURE's output, two counts of bytes (dpkg's, the Python folders'); ValueError for anything else."""
    words = output.split()
    if len(words) != 2 or not all(word.isdigit() for word in words):
        raise ValueError(f"not two byte counts: {output[-200:]!r}")
    return int(words[0]), int(words[1])
