"""`leakbench attack-update CAPTURE`: attacks on an update captured from a user's own Flower app.

The command's parser and its handler (wired into `leakbench.cli`). Bad input — a missing or damaged capture,
weights that do not fit the named victim, a batch of the wrong shape, unknown attacks or settings — is one
line on stderr and exit 2, before any attack runs and before anything is written. Heavy modules (torch, the
harness) are imported in the handler, so `--help` stays quick.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leakbench.attacks import Attack
    from leakbench.fl import ClientUpdate
    from leakbench.harness.captured import CapturedResult, VictimShape

COMMAND = "attack-update"


def add_attack_update(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `attack-update` to the command line's subcommands."""
    parser = sub.add_parser(COMMAND, help="attack an update captured from your own Flower app (leakbench_capture)")
    parser.add_argument("update", type=Path, metavar="CAPTURE",
                        help="a capture folder (OUT/round-R/node-N), its capture.json, or a folder holding one capture")
    parser.add_argument("--arch", default="fc", help="the registered victim the client trains (default fc; "
                        "`--plugin MODULE` for a victim plugin wrapping your own network)")
    parser.add_argument("--width", type=int, default=200, help="its hidden width (default 200)")
    parser.add_argument("--depth", type=int, help="its depth (default: the architecture's, 6 for fc)")
    parser.add_argument("--image-shape", metavar="CxHxW",
                        help="the images the model takes, e.g. 3x32x32 (default: the captured batch's)")
    parser.add_argument("--num-classes", type=int, help="classes (default: the length of the weights' last bias)")
    parser.add_argument("--lr", type=float, help="the client's learning rate η, where the capture records none")
    parser.add_argument("--attack", action="append", default=[], metavar="NAME",
                        help="an attack to run (repeatable; default: every registered attack the update allows)")
    parser.add_argument("--layer", type=int, help="the layer layered attacks target (default: the first attackable)")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a hyperparameter of every --attack named (repeatable; needs --attack)")
    parser.add_argument("--lpips-weights", type=Path, help="torchvision AlexNet weights for LPIPS")
    parser.add_argument("--lpips-net", choices=["alex", "vgg"], default="alex", help="LPIPS trunk (default alex)")
    parser.add_argument("--out", type=Path, help="write one cell folder per attack here (OUT/ATTACK)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                        help="import MODULE first (attacks or victims it registers)")


def parse_shape(text: str) -> tuple[int, int, int]:
    """'3x32x32' → (3, 32, 32); one ConfigError line for anything else."""
    from leakbench.core.errors import ConfigError

    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and 0 < int(p) <= 4096 for p in parts):
        raise ConfigError(f"--image-shape expects CxHxW with sizes 1..4096, e.g. 3x32x32; got {text!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def check_options(args: argparse.Namespace) -> None:
    """The checks that need no capture: sizes, --param without --attack, the output folder."""
    from leakbench.cli import check_attack_out
    from leakbench.core.errors import ConfigError
    from leakbench.core.limits import check_depth, check_width
    from leakbench.records.cells import check_out_dir
    from leakbench.records.seal import is_cell_folder

    check_width(args.width, "--width")
    if args.depth is not None:
        check_depth(args.depth, "--depth")
    if args.num_classes is not None and not 1 <= args.num_classes <= 1_000_000:
        raise ConfigError(f"--num-classes must be 1..1000000, got {args.num_classes}")
    if args.param and not args.attack:
        raise ConfigError("--param needs --attack (the hyperparameters of which attack?)")
    if args.out is not None:
        check_attack_out(args.out)
        check_out_dir(args.out)
        foreign = [p.name for p in args.out.iterdir() if not is_cell_folder(p)] if args.out.is_dir() else []
        if foreign:
            raise ConfigError(f"--out {args.out} holds {foreign[0]!r}, which is not a leakbench cell folder; "
                              "leakbench replaces only its own output: choose a new or empty folder")


def cmd_attack_update(args: argparse.Namespace) -> int:
    """Load the capture, build the victim and the update, run each attack in a sandboxed worker, score, write."""
    check_options(args)
    from leakbench.cli import lpips_for
    from leakbench.fl.capture import load_capture
    from leakbench.harness import captured
    from leakbench.harness.isolation import workers
    from leakbench.models import default_depth
    from leakbench.progress import attack_progress

    capture = load_capture(args.update)
    image_shape, num_classes = captured.default_shape(
        capture, parse_shape(args.image_shape) if args.image_shape else None, args.num_classes)
    shape = captured.VictimShape(args.arch, args.width, default_depth(args.arch) if args.depth is None else args.depth,
                                 image_shape, num_classes)
    lr = captured.capture_lr(capture, args.lr)
    model = captured.capture_victim(capture, shape)
    captured.check_batch(capture, shape)
    update = captured.captured_update(capture, model, lr)
    chosen = chosen_attacks(args, shape, update)
    scorer, note = lpips_for(args.lpips_weights, args.lpips_net)
    hidden = captured.hidden_paths(capture, args.update, args.out)
    workers().prestart()
    results = []
    with attack_progress(sys.stderr if sys.stderr.isatty() else None):
        for attack, layer in chosen:
            result = captured.run_attack(capture, update, attack, layer, shape, lr, hidden, scorer, note)
            if args.out is not None:
                write_result(result, args.out / attack.name)
            results.append(result)
            if not args.json:
                print(human_lines(result), flush=True)
    if args.json:
        from leakbench.records.artifacts import json_safe

        print(json.dumps(json_safe({"capture": str(capture.folder), "cells": [r.summary for r in results]})))
    return 0


def chosen_attacks(args: argparse.Namespace, shape: VictimShape, update: ClientUpdate) -> list[tuple[Attack, int]]:
    """The configured attacks to run and their layers: each --attack (its settings and its needs of the update
    checked: a ConfigError), or every registered attack whose needs the update meets (the rest named in one
    note on stderr)."""
    from leakbench.attacks import attack_class, list_attacks
    from leakbench.cli import parse_params
    from leakbench.core.errors import ConfigError
    from leakbench.harness.job import configure_attack
    from leakbench.models import first_attackable_layer

    params = parse_params(args.param)
    names = list(dict.fromkeys(args.attack)) or [name for name, _ in list_attacks()]
    chosen, skipped = [], []
    for name in names:
        cls = attack_class(name)
        layer = (args.layer or first_attackable_layer(shape.arch, shape.depth)) if cls.layered else 1
        try:
            attack = configure_attack(name, params, layer, cls)
            attack.check_update(update)
        except ConfigError as exc:
            if args.attack:
                raise ConfigError(f"--attack {name}: {exc}") from None
            skipped.append(name)
            continue
        chosen.append((attack, layer))
    if skipped:
        print(f"leakbench: note: not applicable to this update, skipped: {', '.join(skipped)}", file=sys.stderr)
    if not chosen:
        raise ConfigError("no registered attack applies to this update")
    return chosen


def write_result(result: CapturedResult, folder: Path) -> None:
    """One attack's cell folder, written whole (`records.cells.write_cell_files`), with grid.png when scored."""
    from leakbench.harness.captured import result_files
    from leakbench.records.cells import write_cell_files
    from leakbench.reporting.grid import save_grid

    truth, aligned = result.truth, result.aligned

    def grid(tmp: Path) -> None:
        if truth is not None and result.summary["space"] == "image":
            failed = [not result.output.reconstruction.answered] * len(truth)
            save_grid(tmp / "grid.png", truth, aligned, caption=f"{result.summary['attack']} on a Flower capture",
                      failed=failed)

    write_cell_files(result_files(result), folder, grid)


def human_lines(result: CapturedResult) -> str:
    """A readable summary of one attack on a capture."""
    s = result.summary

    def f(value: Any, digits: int = 1) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    head = (f"{s['attack']} on Flower capture round {s['round']}, node {s['node_id']} ({s['arch']} w{s['width']} "
            f"d{s['depth']}, layer {s['layer']}, η {s['lr']:g}, b {s['batch_size']}): {s['status']}"
            + (f" — {s['reason']}" if s["reason"] else ""))
    if not s["scored"]:
        return f"{head}\n  {s['score_note']}\n  {s['seconds']:.2f} s"
    return (f"{head}\n  exact {100 * s['exact_fraction']:.0f}% of {s['n_images']} images; PSNR mean "
            f"{f(s['psnr_mean'])}, median {f(s['psnr_median'])}, min {f(s['psnr_min'])} dB; SSIM "
            f"{f(s['ssim_mean'], 4)}; LPIPS {f(s['lpips_mean'], 3)}" + (f" ({s['lpips_note']})" if s["lpips_note"]
                                                                      else "") + f"\n  {s['seconds']:.2f} s")
