#!/usr/bin/env python3
"""Entry point: `python build.py --help`. The code lives in the torchimages package."""

from torchimages.cli import run

if __name__ == "__main__":
    run()
