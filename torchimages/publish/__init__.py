"""Tested images pushed, promoted, described (SBOMs) and compared between releases."""
