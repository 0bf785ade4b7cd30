"""Hostile text for the fuzz tests: shell metacharacters, newlines, control characters, rich markup, path tricks and
look-alikes of valid values, joined at random."""

from __future__ import annotations

from hypothesis import strategies as st

PIECES = [";", "&&", "|", "$(id)", "`id`", "${HOME}", "$", "'", '"', "\\", "\n", "\r", "\t", "\x00", "\x1b[31m", "\u202e",
          "\u200b", "[/x]", "[bold]", "../", "/etc/passwd", ".", "..", "~", "#", " ", "*", "?", "--index-url",
          "-e ", "RUN ", "@", "https://evil.example/x.whl", ":", "=", ">=", "<", "[", "]",
          "2.13.0", "3.11", "git", "einops", "debian:bookworm-slim", "x", "A"]
hostile = st.lists(st.sampled_from(PIECES) | st.text(max_size=2), min_size=1, max_size=6).map("".join)
