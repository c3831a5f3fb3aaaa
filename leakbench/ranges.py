"""The documented import path of the value ranges for plugins (`from leakbench.core.ranges import Ranged, ranged`,
docs/add-a-defence.md, docs/api.md): the ranges live in the base layer, `leakbench.core.ranges`."""

from __future__ import annotations

from leakbench.core.ranges import (
    INT64,
    MAX_LR,
    MAX_NOISE_STD,
    MAX_SECONDS,
    MAX_STEPS,
    MAX_WEIGHT,
    REQUIRED,
    Range,
    Ranged,
    check_choice,
    check_ranges,
    check_value,
    chosen,
    field_choices,
    field_range,
    range_text,
    ranged,
)

__all__ = ["INT64", "MAX_LR", "MAX_NOISE_STD", "MAX_SECONDS", "MAX_STEPS", "MAX_WEIGHT", "REQUIRED", "Range", "Ranged",
           "check_choice", "check_ranges", "check_value", "chosen", "field_choices", "field_range", "range_text",
           "ranged"]
