"""The two consoles every command prints to: results on stdout, progress and problems on stderr.

markup=False: user and engine text ("[/x]" in a name, a tag or a build log line) is printed as it is; the few
styled lines escape what they interpolate and ask for markup.
"""

from __future__ import annotations

import sys

from rich.console import Console

err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 240, markup=False)
