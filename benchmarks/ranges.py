"""Command-line integer lists of the benchmark scripts: "0-9" (a range, both ends included) or "1,2,4"."""

from __future__ import annotations


def parse_range(text: str) -> list[int]:
    """"0-9" or "1,2,4" → list of ints."""
    if "-" in text and "," not in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(v) for v in text.split(",")]
