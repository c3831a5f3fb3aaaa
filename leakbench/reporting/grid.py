"""PNG grid of reconstructions above their ground truth.

Layout: columns pair a reconstruction (upper row) with its ground-truth image
(lower row). Large batches wrap into several blocks of at most
``MAX_COLUMNS`` columns, each block a reconstruction row above a ground-truth
row, blocks stacked top to bottom. Failed or missing reconstructions are drawn
as a mid-grey tile with a red X and red border. Small images are upscaled by
nearest neighbour so that tiles are at least ``MIN_TILE`` pixels. A caption is
written under the grid.
"""

from __future__ import annotations

import importlib.util
import math
import os
import tempfile
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont
from torch import Tensor

from leakbench.core.errors import LeakbenchError
from leakbench.records.folders import honour_umask

MAX_COLUMNS = 16
"""Most columns (image pairs) in one block."""

MIN_TILE = 64
"""Smallest tile side in pixels after nearest-neighbour upscaling."""

GAP = 2
"""Pixels between tiles inside a block."""

BLOCK_GAP = 14
"""Pixels between blocks."""

MARGIN = 8
"""Outer margin in pixels."""

BACKGROUND = (255, 255, 255)
FAILED_FILL = (128, 128, 128)
FAILED_MARK = (220, 30, 30)
TEXT = (20, 20, 20)
ROW_LABELS = ("recon", "truth")


def _dejavu_path() -> Path | None:
    """DejaVu Sans as shipped with matplotlib (wide Unicode coverage), if installed."""
    spec = importlib.util.find_spec("matplotlib")
    if spec is None or spec.origin is None:
        return None
    candidate = Path(spec.origin).parent / "mpl-data" / "fonts" / "ttf" / "DejaVuSans.ttf"
    return candidate if candidate.is_file() else None


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    """DejaVu Sans when available (renders dashes, arrows, Greek), else Pillow's default."""
    path = _dejavu_path()
    if path is not None:
        try:
            return ImageFont.truetype(str(path), size=size)
        except OSError:  # Pillow built without FreeType
            pass
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: fixed-size bitmap font
        return ImageFont.load_default()


def _text_size(draw: ImageDraw.ImageDraw, text: str, font: ImageFont.ImageFont | ImageFont.FreeTypeFont
               ) -> tuple[int, int]:
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)  # whole pixels from (0, 0): ints
    return int(right - left), int(bottom - top)


def _to_uint8(images: Tensor) -> np.ndarray:
    """``(b, C, H, W)`` floats in [0, 1] -> ``(b, H, W, 3)`` uint8 (NaN -> 0)."""
    x = images.detach().to("cpu", torch.float32)
    x = torch.nan_to_num(x, nan=0.0, posinf=1.0, neginf=0.0).clamp(0.0, 1.0)
    if x.shape[1] == 1:
        x = x.repeat(1, 3, 1, 1)
    arr = (x * 255.0).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    return np.ascontiguousarray(arr)


def _tile(pixels: np.ndarray, scale: int) -> Image.Image:
    img = Image.fromarray(pixels)
    if scale != 1:
        img = img.resize((img.width * scale, img.height * scale), Image.Resampling.NEAREST)
    return img


def _failed_tile(width: int, height: int) -> Image.Image:
    img = Image.new("RGB", (width, height), FAILED_FILL)
    draw = ImageDraw.Draw(img)
    line = max(2, min(width, height) // 24)
    draw.rectangle((0, 0, width - 1, height - 1), outline=FAILED_MARK, width=line)
    inset = max(line * 2, min(width, height) // 5)
    draw.line((inset, inset, width - 1 - inset, height - 1 - inset), fill=FAILED_MARK, width=line)
    draw.line((inset, height - 1 - inset, width - 1 - inset, inset), fill=FAILED_MARK, width=line)
    return img


def _check(truth: Tensor, recon: Tensor | None, failed: Sequence[bool] | None) -> list[bool]:
    if truth.dim() != 4:
        raise LeakbenchError(f"grid needs images shaped (b, C, H, W), got {tuple(truth.shape)}")
    b, c = truth.shape[:2]
    if b == 0:
        raise LeakbenchError("grid needs at least one image")
    if c not in (1, 3):
        raise LeakbenchError(f"grid shows 1- or 3-channel images, got {c} channels")
    if recon is not None and tuple(recon.shape) != tuple(truth.shape):
        raise LeakbenchError(
            f"grid: reconstruction shape {tuple(recon.shape)} differs from ground truth {tuple(truth.shape)}"
        )
    if failed is not None and len(failed) != b:
        raise LeakbenchError(f"grid: {len(failed)} failure flags for {b} images")
    flags = [bool(f) for f in failed] if failed is not None else [False] * b
    if recon is None:
        return [True] * b
    finite = torch.isfinite(recon.detach().reshape(b, -1)).all(dim=1).tolist()
    return [f or not ok for f, ok in zip(flags, finite, strict=True)]


def save_grid(
    path: Path,
    truth: Tensor,
    recon: Tensor | None,
    *,
    caption: str,
    failed: Sequence[bool] | None = None,
    upscale: int | None = None,
) -> None:
    """Write a PNG comparing reconstructions with ground truth.

    Args:
        path: the PNG to write (parent folders are created). Written
            atomically: a temporary file in the same folder, then ``os.replace``.
        truth: ground truth ``(b, C, H, W)`` in [0, 1], C = 1 (grey) or 3.
        recon: reconstructions already aligned with ``truth`` (same shape,
            ``recon[i]`` pairs with ``truth[i]``), or ``None`` when the attack
            produced nothing. Values are clamped to [0, 1] for display.
        caption: text drawn under the grid (wrapped to its width).
        failed: per-item flags; flagged items, and items with any non-finite
            value, are drawn as failed (grey tile, red X).
        upscale: integer nearest-neighbour factor; default the smallest one
            making each tile side at least ``MIN_TILE`` pixels.
    """
    flags = _check(truth, recon, failed)
    b, _, h, w = truth.shape
    scale = upscale if upscale is not None else max(1, math.ceil(MIN_TILE / min(h, w)))
    if scale < 1:
        raise LeakbenchError(f"grid upscale must be a positive integer, got {upscale}")
    tw, th = w * scale, h * scale

    truth_px = _to_uint8(truth)
    recon_px = _to_uint8(recon) if recon is not None else None

    n_blocks = math.ceil(b / MAX_COLUMNS)
    cols = math.ceil(b / n_blocks)  # balance the blocks: 40 -> 14, 14, 12

    font_size = max(11, min(18, th // 4))
    label_font = _font(font_size)
    caption_font = _font(max(12, min(18, font_size)))
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    label_w = max(_text_size(probe, s, label_font)[0] for s in ROW_LABELS) + 8

    grid_w = label_w + cols * tw + (cols - 1) * GAP
    block_h = 2 * th + GAP
    grid_h = n_blocks * block_h + (n_blocks - 1) * BLOCK_GAP

    # Wrap the caption to the grid width (at least ~40 characters per line).
    char_w = max(1, _text_size(probe, "abcdefghijklmnopqrstuvwxyz", caption_font)[0] / 26)
    width_chars = max(40, int(grid_w / char_w))
    lines = []
    for paragraph in caption.splitlines() or [""]:
        lines.extend(textwrap.wrap(paragraph, width=width_chars) or [""])
    line_h = _text_size(probe, "Ag", caption_font)[1] + 4
    text_w = max((_text_size(probe, ln, caption_font)[0] for ln in lines), default=0)

    canvas_w = 2 * MARGIN + max(grid_w, text_w)
    canvas_h = 2 * MARGIN + grid_h + 10 + len(lines) * line_h
    canvas = Image.new("RGB", (canvas_w, canvas_h), BACKGROUND)
    draw = ImageDraw.Draw(canvas)

    failed_tile = _failed_tile(tw, th)
    for blk in range(n_blocks):
        y0 = MARGIN + blk * (block_h + BLOCK_GAP)
        for row, label in enumerate(ROW_LABELS):
            lw, lh = _text_size(draw, label, label_font)
            draw.text((MARGIN + label_w - 8 - lw, y0 + row * (th + GAP) + (th - lh) // 2), label,
                      fill=TEXT, font=label_font)
        for col in range(cols):
            i = blk * cols + col
            if i >= b:
                break
            x = MARGIN + label_w + col * (tw + GAP)
            if flags[i] or recon_px is None:
                canvas.paste(failed_tile, (x, y0))
            else:
                canvas.paste(_tile(recon_px[i], scale), (x, y0))
            canvas.paste(_tile(truth_px[i], scale), (x, y0 + th + GAP))

    y = MARGIN + grid_h + 10
    for ln in lines:
        draw.text((MARGIN, y), ln, fill=TEXT, font=caption_font)
        y += line_h

    save_png(canvas, path)


def save_png(canvas: Image.Image, path: Path) -> None:
    """Write `canvas` as PNG atomically: a temporary file in the same folder, then ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            canvas.save(fh, format="PNG")
        honour_umask(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


@dataclass(frozen=True)
class ComparisonRow:
    """One attack's row of a comparison figure: its reconstructions aligned with the ground truth shown
    (None when it produced none), a short text under each tile, and which tiles failed."""

    label: str
    images: Tensor | None
    captions: Sequence[str]
    failed: Sequence[bool]


def save_comparison(path: Path, truth: Tensor, rows: Sequence[ComparisonRow], *, caption: str) -> None:
    """The figure papers print: ground truth on top, one row per attack below, the same images in every
    row, a metric line under each tile, failures as grey tiles with a red X."""
    b, _, h, w = truth.shape
    scale = max(1, math.ceil(MIN_TILE / min(h, w)))
    tw, th = w * scale, h * scale
    label_font, small = _font(max(11, min(16, th // 4))), _font(11)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    label_w = max(_text_size(probe, r, label_font)[0] for r in ["truth", *(row.label for row in rows)]) + 10
    text_h = _text_size(probe, "Ag", small)[1] + 3
    row_h = th + GAP + 2 * text_h
    cap_lines = textwrap.wrap(caption, width=max(40, (label_w + b * (tw + 3 * GAP)) // 7)) or [""]
    col = tw + 3 * GAP
    canvas = Image.new("RGB", (2 * MARGIN + label_w + b * col, 2 * MARGIN + th + GAP + len(rows) * row_h
                               + 10 + len(cap_lines) * (text_h + 2)), BACKGROUND)
    draw = ImageDraw.Draw(canvas)
    truth_px = _to_uint8(truth)
    failed_tile = _failed_tile(tw, th)
    for r, (label, px, texts, flags) in enumerate([("truth", truth_px, [""] * b, [False] * b), *(
            (row.label, _to_uint8(row.images) if row.images is not None else None, row.captions,
             _check(truth, row.images, row.failed)) for row in rows)]):
        y = MARGIN + (0 if r == 0 else th + GAP + (r - 1) * row_h)
        lw, lh = _text_size(draw, label, label_font)
        draw.text((MARGIN + label_w - 10 - lw, y + (th - lh) // 2), label, fill=TEXT, font=label_font)
        for i in range(b):
            x = MARGIN + label_w + i * col
            canvas.paste(failed_tile if px is None or flags[i] else _tile(px[i], scale), (x, y))
            for k, line in enumerate(texts[i].splitlines()[:2]):
                draw.text((x + 1, y + th + 1 + k * text_h), line, fill=FAILED_MARK if flags[i] else TEXT, font=small)
    y = canvas.height - MARGIN - len(cap_lines) * (text_h + 2)
    for line in cap_lines:
        draw.text((MARGIN, y), line, fill=TEXT, font=small)
        y += text_h + 2
    save_png(canvas, path)


__all__ = ["MAX_COLUMNS", "MIN_TILE", "ComparisonRow", "save_comparison", "save_grid", "save_png"]
