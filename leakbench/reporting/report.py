"""`leakbench report RUN_DIR`: what a run found, then its figures, then the detail.

The page opens with the key findings and one headline table (`findings`), then the figures (`figures`:
one colour per attack from `palette`, levels in `order.level_key` order, PSNR capped with an exact
band), the defence boards, and last, folded away in the HTML, the per-setting pivots, the comparison
grids, the per-axis tables and every cell. `--self-contained` inlines the images into the HTML page.

Reads only the run folder (its manifest.json and the intact cell folders; a damaged cell is left
out with one warning line) and writes `REPORTS/SUITE.md`, `REPORTS/SUITE.html` and
`REPORTS/SUITE/{figures,grids}/`, replacing only an earlier report of leakbench's (`target`).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import tomllib
import warnings
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from leakbench.cell.axes import baselines, report_labels, with_defaults
from leakbench.core.errors import LeakbenchError, LeakbenchWarning
from leakbench.fl.dp import LEVEL_PREFIXES
from leakbench.metrics.lpips_fetch import FETCH_COMMAND
from leakbench.metrics.matching import matching_line
from leakbench.records.cell_state import state_text
from leakbench.records.folders import remove_leftovers, replace_folder, temp_folder
from leakbench.records.runs import read_run, read_run_manifest
from leakbench.reporting.aggregate import (
    INCOMPLETE_NOTE,
    PSNR_CAP,
    REID_NOTE,
    STAT_HEADER,
    cells_note,
    dp_order,
    epsilon_labels,
    grouped,
    incomplete_cells,
    model_order,
    shared_note,
    stat_cells,
    with_model,
)
from leakbench.reporting.compare import comparison_figures
from leakbench.reporting.defences import (
    NO_ADAPTATIONS,
    Adaptations,
    defence_blocks,
    privacy_utility_data,
    verdict_points,
)
from leakbench.reporting.figures import axis_figure, defence_figure, privacy_utility_figure, verdict_figure
from leakbench.reporting.findings import findings_block, headline_table, settings
from leakbench.reporting.order import NONE, defence_levels, level_sorter, ordered
from leakbench.reporting.pivot import pivot_table, triple
from leakbench.reporting.render import Block, Images, Section, Table, Text, html_document, markdown
from leakbench.reporting.target import check_report_target, foreign_report_entries, write_marker
from leakbench.reporting.trust import UNRANKED_COLUMNS, UNRANKED_NOTE, UNRANKED_TITLE, ranked, unranked_rows

AXES = report_labels()
"""Cells column → label of every axis with a "By …" table (`leakbench.cell.axes`: batch size b, attacked layer,
DP level, client, victim model, then any axis declared since)."""


def load_run(run_dir: Path) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame]:
    """The manifest, per-image records and per-cell table of a run folder.

    Read from the cell folders (`records.runs.read_run`), so an interrupted sweep (whose consolidated tables are
    older than its last cells) reports every cell that finished. A damaged cell folder is left out, with a
    warning; the manifest's `damaged` lists it (id → why).
    """
    manifest = read_run_manifest(run_dir)
    try:
        run = read_run(run_dir, [c["cell_id"] for c in manifest["cells"]])
    except (OSError, ValueError, KeyError) as exc:
        message = f"{run_dir} is not a finished run folder ({type(exc).__name__}: {exc})"
        raise LeakbenchError(message.replace("\n", " ")) from None
    for cid, reason in run.damaged.items():
        warnings.warn(LeakbenchWarning(f"cell {cid} in {run_dir} is damaged ({reason}); left out of the report "
                                       "(`leakbench run` recomputes it)"), stacklevel=2)
    return {**manifest, "damaged": run.damaged}, run.records, run.cells


def baseline(cells: pd.DataFrame) -> dict[str, Any]:
    """The value each axis is held at while another axis varies: smallest layer, least noise, the first
    victim model in `model_order` (an untrained model comes before its trained ones); an axis declared in
    `leakbench.cell.axes` since, its default."""
    base = {"layer": int(cells["layer"].min()), "dp": dp_order(cells)[0], "model": model_order(cells)[0],
            **baselines()}
    if "client" in cells:  # runs stored before FedAvg existed have no client column
        clients = set(cells["client"])
        base["client"] = "fedsgd" if "fedsgd" in clients else min(clients)
    return base


PIVOT_FIXED = ["dataset", "model", "layer", "dp", "client"]
"""What one pivot of the report holds fixed; its columns are batch sizes, its rows attacks."""


def pivot_blocks(records: pd.DataFrame, cells: pd.DataFrame) -> list[Block]:
    """Per dataset and setting: attacks × batch size, each entry exact % · PSNR median · LPIPS."""
    cells, eps = with_model(cells), epsilon_labels(cells)
    blocks: list[Block] = []
    rank: dict[Hashable, int] = {m: i for i, m in enumerate(model_order(cells))}
    dps: dict[Hashable, int] = {d: i for i, d in enumerate(dp_order(cells))}
    order = level_sorter(cells)
    groups = sorted(cells.groupby(PIVOT_FIXED, sort=True),
                    key=lambda g: (g[0][0], rank[g[0][1]], g[0][2], dps[g[0][3]], order(g[0][4])))
    for setting, sub in groups:
        dataset, model, layer, dp, client = setting
        title = (f"{dataset} · {model} · layer {layer} · {f'DP {dp}' if dp == NONE else eps.get(dp, f'DP {dp}')}"
                 + ("" if client == "fedsgd" else f" · {client}"))
        table = pivot_table(records[records["cell_id"].isin(set(sub["cell_id"]))], sub, title=title,
                            columns=["batch_size"], label=lambda c: f"b={c[0]}", entry=triple)
        table.notes.append("Each entry: exact % · PSNR median · mean LPIPS (– where not computed; in feature space, "
                           "where there are no images: exact % · median relative feature error); '100 % exact' "
                           f"where every image is exact; PSNR past {PSNR_CAP:.0f} dB reads '≥ {PSNR_CAP:.0f} dB'.")
        table.notes.append(REID_NOTE)
        blocks.append(table)
    return blocks


def axis_blocks(records: pd.DataFrame, cells: pd.DataFrame,
                layerless: list[str]) -> tuple[list[Block], dict[str, pd.DataFrame]]:
    """One table per axis (other axes at their baseline) and the per-cell data of its figure."""
    cells = with_defaults(with_model(cells))  # the client names its noise and threat model
    base = baseline(cells)
    eps = epsilon_labels(cells)
    blocks: list[Block] = []
    figure_data = {}
    for axis in AXES:
        fixed = {k: v for k, v in base.items() if k != axis}
        subset = cells
        for key, value in fixed.items():
            subset = subset[subset[key] == value]
        if axis == "layer":
            subset = subset[~subset["attack"].isin(layerless)]
        if axis not in subset or (subset[axis].nunique() < 2 and axis != "batch_size"):
            continue
        by = ["dataset", "attack", axis] + (["batch_size"] if axis != "batch_size" else [])
        rows = [[*(_show(k, v, eps) for k, v in zip(by, key, strict=True)), *stat_cells(s)]
                for key, s in grouped(records, subset, by)]
        held = ", ".join(f"{k} = {eps.get(v, v) if k == 'dp' else v}" for k, v in fixed.items())
        notes = [f"Other axes held at: {held}; seeds pooled.", REID_NOTE]
        if axis == "layer" and layerless:
            notes.append(f"The layer axis applies to attacks with a layer setting only; {', '.join(layerless)} "
                         "reconstruct images from the whole update and run once, with layer recorded as 1.")
        blocks.append(Table(f"By {AXES[axis]}", [*by, *STAT_HEADER], rows, notes))
        figure_data[axis] = subset
    return blocks, figure_data


def _show(key: str, value: Any, eps: dict[Hashable, str]) -> str:
    return eps.get(value, str(value)) if key == "dp" else str(value)


def all_cells_table(records: pd.DataFrame, cells: pd.DataFrame, order: list[str]) -> Table:
    """Every cell, in plan order, with its leakage state (`records.cell_state.state_text`: 'exact', 're-identified
    (2 of 32)', 'failed (budget)', …) and, for a failed or incomplete one, its reason."""
    by_id = cells.set_index("cell_id")
    rows = []
    for cid in [c for c in order if c in by_id.index]:
        cell = by_id.loc[cid]
        s = grouped(records[records["cell_id"] == cid], cells[cells["cell_id"] == cid], ["cell_id"])[0][1]
        reason = str(cell["reason"]) if cell["status"] != "ok" and isinstance(cell["reason"], str) else ""
        status = state_text(cells[cells["cell_id"] == cid].iloc[0]) + (f": {reason}" if reason else "")
        rows.append([*(str(cell[c]) for c in ("attack", "dataset", "batch_size", "layer", "dp", "seed")),
                     *stat_cells(s), status, cid])
    return Table("All cells", ["attack", "dataset", "b", "layer", "dp", "seed", *STAT_HEADER, "status", "cell"], rows)


def per_cell_table(records: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: its PSNR median (∞ included; NaN when no image has one) and exact %."""
    psnr = records["psnr"] if "psnr" in records else pd.Series(np.nan, index=records.index)
    return records.assign(psnr=psnr).groupby("cell_id").agg(
        psnr=("psnr", lambda p: float(np.median(p.dropna())) if p.notna().any() else np.nan),
        exact_pct=("exact", lambda e: 100 * e.mean()))


def figures(figure_data: dict[str, pd.DataFrame], records: pd.DataFrame, cells: pd.DataFrame, folder: Path,
            suite: str) -> Images:
    """PSNR and exact % against each axis with two levels or more, one PNG per axis; when the run has defence
    levels besides DP, one figure per dataset and victim of every defence's strength (DP included) instead of
    the DP and client axes."""
    per_cell = per_cell_table(records)
    eps = epsilon_labels(cells)
    several_models = with_model(cells)["model"].nunique() > 1
    levels = defence_levels(with_model(cells))
    defended = ((levels != NONE) & ~levels.str.startswith(LEVEL_PREFIXES)).any()  # DP alone: its own axis figure
    items = []
    for axis, subset in figure_data.items():
        at = ""
        if axis != "batch_size":  # one batch size, the largest, so points differ in this axis only
            b = int(subset["batch_size"].max())
            subset, at = subset[subset["batch_size"] == b], f" at b = {b}"
        if subset[axis].nunique() < 2 or (defended and axis in ("dp", "client")):
            continue  # a single level is a table row, not a figure; defences get their own figure below
        data = subset.join(per_cell, on="cell_id")
        order = dp_order(subset) if axis == "dp" else model_order(subset) if axis == "model" \
            else ordered(subset[axis], level_sorter(subset))
        if axis == "dp":
            data = data.assign(dp=data["dp"].map(eps))
            order = [eps[o] for o in order]
        if axis != "model" and several_models:  # the figure holds one victim: say which
            at += f", {subset['model'].iloc[0]}"
        name = f"{axis}.png"
        axis_figure(data, axis, order, AXES[axis], folder / name,
                    f"{suite}: PSNR (image space only) and exact % against {AXES[axis]}{at}")
        items.append((f"{suite}/figures/{name}", f"PSNR and exact % against {AXES[axis]}{at}"))
    if defended:
        items += defence_figures(per_cell, cells, folder, suite)
    return Images("Figures", items, [
        "Points: mean over the cells (seeds) of a setting; failed images count as not exact and carry no PSNR. "
        f"PSNR: each cell's median, drawn up to {PSNR_CAP:.0f} dB; a cell whose every image is exact is drawn in "
        "the green 'exact' band above (an exact image's PSNR is 140 dB to ∞, float digits, not quality). Each "
        "attack has one colour in every figure (leakbench.reporting.palette); levels are ordered numerically."])


def defence_figures(per_cell: pd.DataFrame, cells: pd.DataFrame, folder: Path, suite: str) -> list[tuple[str, str]]:
    """Per dataset and victim: exact % and PSNR against each defence's strength, at the smallest layer and
    the largest batch size (so the points differ in the defence only)."""
    cells = with_model(cells)
    cells = cells.assign(level=defence_levels(cells))
    items = []
    rank: dict[Hashable, int] = {m: i for i, m in enumerate(model_order(cells))}
    for (dataset, model), sub in sorted(cells.groupby(["dataset", "model"], sort=True),
                                        key=lambda g: (g[0][0], rank[g[0][1]])):
        b, layer = int(sub["batch_size"].max()), int(sub["layer"].min())
        sub = sub[(sub["batch_size"] == b) & (sub["layer"] == layer)]
        name = "defences-" + re.sub(r"[^A-Za-z0-9.]+", "-", f"{dataset} {model}").strip("-") + ".png"
        caption = (f"{dataset} · {model}: exact % and PSNR against each defence's strength "
                   f"(b = {b}, layer {layer}; 'none' is the undefended client)")
        if defence_figure(sub.join(per_cell, on="cell_id"), folder / name, f"{suite}: {caption}") is not None:
            items.append((f"{suite}/figures/{name}", caption))
    return items


def defence_sections(records: pd.DataFrame, cells: pd.DataFrame, folder: Path, suite: str,
                     adaptations: Adaptations = NO_ADAPTATIONS) -> list[Block]:
    """The defence boards of the run (as in the leaderboard), then each board with trained victims as a figure
    (`verdict_items`), then per dataset, trained victim and attack with more than one defence level: leakage (exact
    %, PSNR median, LPIPS) against the victim's test accuracy, one point per level (nothing for a run without
    defence levels)."""
    data = privacy_utility_data(records, with_model(cells))
    items = verdict_items(records, cells, folder, suite, adaptations)
    for (dataset, model, attack), sub in data.groupby(["dataset", "model", "attack"], sort=True):
        if sub["level"].nunique() < 2:
            continue
        name = "privacy-utility-" + re.sub(r"[^A-Za-z0-9.]+", "-", f"{attack} {dataset} {model}").strip("-") + ".png"
        caption = f"{attack} on {dataset} · {model}: leakage against test accuracy, one point per defence level"
        privacy_utility_figure(sub, folder / name, f"{suite}: {caption}")
        items.append((f"{suite}/figures/{name}", caption))
    boards = defence_blocks(records.assign(suite=suite), with_model(cells).assign(suite=suite), adaptations)
    if not items:
        return boards
    return [*boards, Images("Privacy–utility: leakage against the victim's test accuracy", items, [
        "Each victim was trained with its defence level applied to every update (FedSGD rounds of the training "
        "recipe); its accuracy is on the dataset's test part. The first figures ('verdict-…') are the defence "
        "boards above as points: each level's worst attack, adaptive ones included (circles: adaptive; squares: "
        "not), re-identification % ± its seed spread against the accuracy cost with its 95 % interval; hollow: a "
        "marked row; named: the first rank and 'none'. The per-attack figures after them: exact %, PSNR median and"
        " mean LPIPS of the attack pooled over the level's cells (seeds, layers), in the attack's colour, one "
        "marker per batch size. Named: 'none' and the levels no other level beats in both accuracy and privacy "
        "(the rest are in the defence tables above)."])]


def verdict_items(records: pd.DataFrame, cells: pd.DataFrame, folder: Path, suite: str,
                  adaptations: Adaptations) -> list[tuple[str, str]]:
    """Per defence board with trained victims: its verdict figure (`figures.verdict_figure`), as (path, caption)."""
    items = []
    points = verdict_points(records, with_model(cells), adaptations)
    for (dataset, model, b), sub in points.groupby(["dataset", "model", "batch_size"], sort=False):
        name = "verdict-" + re.sub(r"[^A-Za-z0-9.]+", "-", f"{dataset} {model} b{b}").strip("-") + ".png"
        caption = (f"{dataset} · {model} · b={b}: each defence level's worst attack (adaptive ones included) "
                   "against its accuracy cost")
        verdict_figure(sub, folder / name, f"{suite}: {caption}")
        items.append((f"{suite}/figures/{name}", caption))
    return items


def unranked_blocks(records: pd.DataFrame, cells: pd.DataFrame) -> list[Block]:
    """The cells kept out of the rankings (`reporting.trust`), in one table with the reason; none without any."""
    labelled = with_model(cells)
    rows = unranked_rows(records, labelled.assign(level=defence_levels(labelled)))
    if not rows:
        return []
    return [Table(UNRANKED_TITLE, [c.label for c in UNRANKED_COLUMNS], [[e.text for e in row] for row in rows],
                  [UNRANKED_NOTE])]


def grids(run_dir: Path, manifest: dict[str, Any], records: pd.DataFrame, cells: pd.DataFrame, folder: Path,
          suite: str) -> Images:
    """One comparison figure per batch and setting: every attack on the same pre-drawn images."""
    try:
        figures, missing = comparison_figures(run_dir, manifest, records, with_model(cells), folder)
    except LeakbenchError as exc:  # the dataset the truth is re-derived from is not here
        return Images("Comparison grids (uncherry-picked)", [], [f"No grids: {exc}"])
    items = [(f"{suite}/grids/{name}", caption) for name, caption, _ in figures]
    return Images("Comparison grids (uncherry-picked)", items, [*(f"No grids for {m}" for m in missing),
        f"The images of each grid were drawn by a seeded RNG from the batch (grid seed {manifest['grid_seed']}, "
        f"{manifest['grid_images']} per batch) when the sweep was planned, before any attack ran, so every attack "
        "on a batch shows the same images; all are shown, failed reconstructions as grey tiles with a red X. "
        "Ground truth on top, one row per attack, PSNR and LPIPS under each tile. Feature-space cells (layer > 1) "
        "appear only with feature inversion."])


def inline_image(folder: Path) -> Callable[[str], str]:
    """`image_src` for a self-contained page: 'SUITE/figures/x.png' → the PNG under `folder` (the report
    folder being written) as a base64 data: URI."""
    def src(path: str) -> str:
        data = (folder / path.split("/", 1)[1]).read_bytes()
        return "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return src


def write_report(run_dir: Path, reports: Path, *, self_contained: bool = False,
                 adaptations: Adaptations = NO_ADAPTATIONS) -> Path:
    """Write SUITE.md, SUITE.html and SUITE/{figures,grids} under `reports`; return the Markdown path.

    Page order: key findings, the headline table, figures, defence rankings, then the detail (per-setting
    pivots, comparison grids, per-axis tables, every cell) folded away. `self_contained`: the HTML page
    carries its images inline (data: URIs), one file to send on; the Markdown still links the PNGs. `adaptations`:
    which attack adapts to which defence (`citation.registered_adaptations()`), for the defence boards."""
    manifest, records, cells = load_run(run_dir)
    suite = manifest["suite"]
    if cells.empty:
        raise LeakbenchError(f"{run_dir} holds no finished cells")
    check_report_target(reports, suite)
    remove_leftovers(reports, suite)  # staging folders of an interrupted report
    staging = temp_folder(reports / suite)
    try:
        (staging / "grids").mkdir()
        axis_tables, figure_data = axis_blocks(records, cells, manifest.get("layerless_attacks", []))
        counts, *method = _intro(manifest, cells)  # the cell count on top, the method after the figures
        intro = [counts, *shared_note(cells)]  # a threat model every cell shares: here, in no label
        kept_records, kept = ranked(records, cells)  # a third-party defence with a third-party attack: no result
        found = settings(kept_records, with_model(kept)) if len(kept) else []
        pivots = pivot_blocks(kept_records, kept) if len(kept) else []
        grid_block = grids(run_dir, manifest, records, cells, staging / "grids", suite)
        blocks: list[Block] = [
            findings_block(found), headline_table(found), *unranked_blocks(records, cells),
            figures(figure_data, records, cells, staging / "figures", suite),
            *(defence_sections(kept_records, kept, staging / "figures", suite, adaptations) if len(kept) else []),
            Text("How the numbers are made", paragraphs=method),
            Section(f"Per-setting tables: attacks × batch size ({len(pivots)} tables)", list(pivots), collapsed=True,
                    notes=["One table per dataset, victim, layer, DP level and client (defences); click to open."]),
            Section(f"{grid_block.title} ({len(grid_block.items)} figures)", [grid_block], collapsed=True),
            Section("Per-axis tables and every cell", [*axis_tables, all_cells_table(
                records, cells, [c["cell_id"] for c in manifest["cells"]])], collapsed=True)]
        title = f"leakbench suite '{suite}'"
        write_marker(staging, suite)
        src = inline_image(staging) if self_contained else None
        pages = {f"{suite}.md": markdown(title, intro, blocks),
                 f"{suite}.html": html_document(title, intro, blocks, image_src=src)}
        for name, text in pages.items():  # both written in full before either replaces a page (disk full: neither)
            (staging / name).write_text(text)
        for name in pages:
            os.replace(staging / name, reports / name)
        replace_folder(staging, reports / suite, foreign_report_entries)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return reports / f"{suite}.md"


def _intro(manifest: dict[str, Any], cells: pd.DataFrame) -> list[str]:
    failed = cells_note(cells["status"])
    planned = len(manifest["cells"])
    damaged = manifest.get("damaged", {})
    missing = planned - len(cells) - len(damaged)
    left_out = []
    if missing:
        left_out.append(f"{missing} not run yet")
    if damaged:
        left_out.append(f"{len(damaged)} damaged, left out: {', '.join(damaged)}")
    return [*_suite_line(manifest),
            f"{len(cells)} of {planned} planned cells finished" + (f" ({'; '.join(left_out)})" if left_out else "")
            + f"; {failed} (shown in every table, counted in n and failures"
            + (f"; incomplete: {INCOMPLETE_NOTE}" if incomplete_cells(cells["status"]) else "")
            + f"). {_revisions(manifest)}",
            f"{matching_line(cells)} PSNR peak 1, on images in [0, 1]; mean ± std over finite values; past "
            f"{PSNR_CAP:.0f} dB (a float-exact "
            f"image is 140 dB to ∞) shown as '≥ {PSNR_CAP:.0f}', and as 'exact' where every image is exact. "
            "Exact = every pixel rounds to the same 8-bit value (feature space: max error ≤ 1e-4 of scale). "
            "Failed images count as not exact and carry no PSNR/SSIM.", _lpips_line(cells)]


def _suite_line(manifest: dict[str, Any]) -> list[str]:
    """The suite's own description (its `description` key: what it is, e.g. a smoke test and not a
    comparison), the first thing the report says; none when the suite has none."""
    try:
        description = tomllib.loads(manifest.get("suite_text") or "").get("description")
    except tomllib.TOMLDecodeError:
        return []
    return [f"Suite '{manifest['suite']}': {description}"] if isinstance(description, str) and description else []


def _revisions(manifest: dict[str, Any]) -> str:
    """The git revision the cells were computed at, or each revision with its number of cells when a
    resumed run mixes them."""
    revisions = manifest.get("cell_revisions") or {}
    if len(revisions) > 1:
        listed = ", ".join(f"{rev[:12]} ({n} cells)" for rev, n in sorted(revisions.items(), key=lambda kv: -kv[1]))
        return f"Git revisions (the run was resumed across code changes): {listed}."
    return f"Git revision {next(iter(revisions), None) or manifest.get('git_revision') or 'unknown'}."


def _lpips_line(cells: pd.DataFrame) -> str:
    """Which LPIPS network scored the cells (net and weight source), or why there is none."""
    nets = cells["lpips_net"].fillna("").astype(str) if "lpips_net" in cells else pd.Series([""] * len(cells))
    sources = (cells["lpips_source"].fillna("").astype(str) if "lpips_source" in cells
               else pd.Series([""] * len(cells)))
    used = sorted({(n, src) for n, src in zip(nets, sources, strict=True) if n})
    unscored = int((nets == "").sum())
    if not used:
        return (f"LPIPS: not computed (no verified LPIPS trunk weights; fetch them: {FETCH_COMMAND}; "
                "see docs/reference/metrics.md).")
    parts = [f"{net} (weights: {src})" for net, src in used]
    text = ("LPIPS v0.1, " + "; ".join(parts) + ", verified against published values at load time")
    if len(used) > 1:
        text += " — cells were scored with different networks, compare with care"
    if unscored:
        text += f"; {unscored} cells were stored without LPIPS"
    return text + "."

