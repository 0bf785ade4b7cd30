#!/usr/bin/env python3
"""Entry point: `python build.py --help`. The code lives in the torchimages package."""

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["selfcheck"]:  # on a GPU host with torch, pytest and testinfra only: no Docker SDK, no click
        from torchimages.verify.selfcheck import main

        sys.exit(main(sys.argv[2:]))
    from torchimages.cli import run

    run()
