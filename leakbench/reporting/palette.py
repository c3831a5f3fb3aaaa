"""One colour per attack, the same in every figure and every report: a palette keyed on the attack's name.

Shipped attacks have fixed colours, related attacks in related hues (SPEAR blues and a purple, CPA oranges and browns,
IG greens, DLG reds); any other name (a plugin's attack, one evaluated through `api.evaluate`) gets a
colour derived from a hash of its name, so it too is the same wherever and whenever it is drawn.

    >>> colour("spear")
    '#1f77b4'
"""

from __future__ import annotations

import colorsys
import hashlib
from collections.abc import Iterable

SHIPPED: dict[str, str] = {
    "spear-paper": "#08306b",
    "spear": "#1f77b4",
    "spear-guided": "#17becf",
    "spear-dl": "#6a3d9a",
    "spear-approx": "#6baed6",
    "spear-masked": "#9e9ac8",
    "cpa": "#ff7f0e",
    "cpa-derivative": "#8c564b",
    "cpa-released": "#bcbd22",
    "ig": "#2ca02c",
    "ig-breaching": "#005a32",
    "ig-masked": "#74c476",
    "dlg": "#d62728",
    "dlg-masked": "#e377c2",
    "ig-precode": "#a1d99b",  # issue 43, gm-adaptive: the PRECODE-aware and un-mixing forms
    "dlg-precode": "#f7b6d2",
    "spear-unmix": "#9ecae1",
    "spear-demix": "#3182bd",  # issue 43, mixsec: SPEAR then an estimate from Huang et al.'s MixUp mixtures
    "ig-dequant": "#31a354",  # issue 43, dequant: gradient matching to a known quantiser's intervals
    "dlg-dequant": "#fb6a4a",
    "peeling": "#636363",  # issue 44: LT-code peeling (Shariati & Alambardar Meybodi 2026), a grey of its own
    "imprint": "#7b3294",  # issue 46: a malicious server's attacks, purples and a gold apart from every honest one
    "imprint-adaptive": "#c2a5cf",
    "trap-weights": "#bf812d",
    "trap-weights-adaptive": "#dfc27d",  # the adaptive form: a lighter gold, as imprint-adaptive is a lighter purple
    "fishing": "#8e0152",  # issue 46 follow-up: class fishing (Wen et al.), a plum of the malicious boards
    "mean-image": "#7f7f7f",
}
"""Fixed colours of the shipped attacks (and the example plugin's `mean-image`), hex RGB."""


def colour(attack: str) -> str:
    """The colour of `attack` as '#rrggbb': its fixed colour when shipped, else one from its name's hash."""
    return SHIPPED.get(attack) or hashed(attack)


def hashed(name: str) -> str:
    """A mid-saturation, mid-lightness colour from the SHA-256 of `name` (stable across processes and
    machines, unlike Python's `hash`)."""
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    hue = int.from_bytes(digest[:2], "big") / 65536
    lightness = 0.35 + 0.15 * digest[2] / 255
    saturation = 0.55 + 0.35 * digest[3] / 255
    red, green, blue = colorsys.hls_to_rgb(hue, lightness, saturation)
    return "#" + "".join(f"{round(255 * c):02x}" for c in (red, green, blue))


def colours(attacks: Iterable[str]) -> dict[str, str]:
    """`colour` of each attack (a palette for seaborn's `palette=` or a legend)."""
    return {attack: colour(attack) for attack in attacks}


__all__ = ["SHIPPED", "colour", "colours", "hashed"]
