"""Suite files (shipped: leakbench/suites/*.toml; or a user's file) expanded into cells; a malformed file fails
before anything runs.

The axes are declared once, in `leakbench.cell.axes.AXES` (key, level parser, cell fields, record columns,
report label, `leakbench attack` flag): the known keys, the checks of every axis list, the cell count and
the product below derive from it (docs/reference/suites.md, "Adding an axis").

A suite names attacks (with `[hyperparameters.ATTACK]` tables), datasets, one victim model (or a list,
`models`, below) and the axes:
`batch_sizes`, `layers`, `dp` levels and `seeds`. Every combination is a cell, except that the layer
axis applies only to attacks whose Config has a `layer` field (SPEAR, CPA); the others run once per
remaining combination with layer 1 (they reconstruct images from the whole update / layer 1).

    dp = ["none", {sigma = 1e-4, clip = 1.0}, {sigma = 1e-2, clip = 1.0, delta = 1e-5, q = 0.01, steps = 1}]

`arch = "conv"` picks the conv victim (layer 1 is its trunk; its first FC layer is layer 2, the
default there), `arch = "resnet"` the ResNet-8 with BatchNorm (the same numbering), and a victim
plugin's name its victim (`leakbench.models.outside`; `victim_plugins = ["package.module"]` imports
modules that register victims; installed ones come in through the entry-point group
`leakbench.victims`). `fedavg` levels are "none" (FedSGD) or {epochs, minibatch (0 = b), lr}, an axis like
`dp` (a suite cannot sweep both). `inversion = {steps = 300}` (optional lr, tv) inverts recovered
features of inner layers to images (cells of image attacks such as IG get none; a suite where no
cell attacks an inner layer with a layer attack is refused: it would invert nothing).
`grid_images` (1 … 1024, default 8) and `grid_seed` pick the images the comparison grids show.
`adaptive_only = true` runs an adaptive attack (one whose `Attack.adapts_to` names defences, e.g.
`ig-masked`) only where it adapts: cells whose attacker knows the defence (`threat`) and whose update holds
a defence it adapts to (`adapts_here`); everywhere else it would repeat its plain form.
Every number of a `dp`, `fedavg`, `inversion` or `train` table and of `[hyperparameters.X]` has a
declared range (`leakbench.core.ranges`; `leakbench show attack X` prints an attack's).
`train_epochs = [0, 1, 5]` is the victim axis: 0 is the victim at init, N > 0 trains it N epochs
(recipe: the optional table `train = {optimizer, lr, momentum, batch_size, weight_decay, augment,
seed}`, else `TrainRecipe`'s defaults) on the dataset's train part, attacking batches of its attack part.
The victim's init comes from the cell's seed; its training seed (shuffling, flips, per-step DP and noise)
is the recipe's `seed` (default 0, one for every cell), or with `seed = "cell"` the cell's seed: each cell
seed then trains a victim of its own (distinct victims for accuracy intervals).

`threat` is the threat-model axis (what the attacker gets besides the update and the model):

    threat = ["default", {labels = "known"}, {batch_size = "estimated"}, {labels = "known", batch_size = "estimated"}]

"default" is labels withheld, batch size known, BatchNorm in eval mode, defence unknown
(`ThreatModel()`); a table changes `labels` ("known" | "withheld"), `batch_size` ("known" |
"estimated": the update carries none), `bn` ("eval" | "train": the mode the client computes its
update in), `bn_stats` ("private" | "shared": the update carries the running statistics after the
step; train mode only) and/or `defence` ("unknown" | "known": the update lists the defences applied
to it, for the adaptive attacks such as `ig-masked`). A suite pairing an attack with a level that
withholds what it requires is refused before anything runs.
`noise = [0.0, 1e-6, 1e-4]` is the additive-noise axis: Gaussian noise of std σ on every shared
gradient entry (`leakbench.fl.noise`, not DP: no clipping, no accountant; not with a `dp` level);
`noise_scale = "max"` makes σ relative to each tensor's max |entry| (default "absolute"; refused
without a `noise` level above 0, where it scales nothing).

`defences` is the update's axis, one level per entry: "none" (FedSGD as it is), a table naming a
registered update transform (`leakbench.fl.transform`: `dp`, `fedavg`, `noise`, `mixup`, `mixup-batch`, `secagg`, or
a defence from a plugin) with its settings, or a list of such tables, applied in order after the
client's update:

    defences = ["none", { name = "noise", sigma = 1e-4, scale = "max" }, { name = "dp", sigma = 1e-2, clip = 1.0 },
                [{ name = "noise", sigma = 1e-6 }, { name = "prune", keep = 0.1 }], { name = "secagg", clients = 4 }]

A level names at most one client transform (one that computes the update: `dp`, `fedavg`, `mixup`,
`mixup-batch`, `secagg`, a plugin's): it replaces the FedSGD client and runs first. `secagg` with K clients gives
each cell K private batches of b images (K·b scored).

Its `dp`, `fedavg` and `noise` levels are the cells (and cell ids) of the keys of those names, which
a suite giving `defences` leaves out. `defence_plugins = ["package.module"]` imports modules that
register defences (or datasets) here, in the harness; installed ones come in through the entry-point
group `leakbench.defences`.

`models` is the victim-model axis: a list of tables, each one victim (the entries are zipped, not
crossed with each other):

    models = [{arch = "fc", width = 256, depth = 2}, {width = 200, depth = 6, train_epochs = 5}]

An entry's keys are `arch`, `width`, `depth` and `train_epochs` (one integer); a key it leaves out
takes the suite's top-level value (`arch`, `width`, `depth`; then the defaults fc, 200, and depth 6
for fc / 3 for conv), so top-level `width = 200` and `models = [{depth = 2}, {depth = 6}]` sweep the
depth at width 200. Top-level `train_epochs` (a list) crosses with every entry that has no
`train_epochs` of its own; a suite giving both top-level `train_epochs` and an entry's
`train_epochs` is refused (which one would apply is ambiguous), as are two entries naming one
model. Without `layers`/`layer`, each model is attacked at its own first attackable layer (1 for
fc, 2 for conv); with them, every listed layer must be attackable in every model. A suite without
`models` has one model, from the top-level keys (the cells, and their ids, are those of earlier
versions).
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from importlib.resources import files
from importlib.resources.abc import Traversable
from itertools import product
from pathlib import Path
from typing import Any

from leakbench.attacks import attack_class
from leakbench.attacks.inversion import inverts
from leakbench.cell.axes import Fields, all_axes, axis, check_lists, crossed, key_types, table
from leakbench.cell.spec import CellSpec, cell_id, cell_settings
from leakbench.core.errors import ConfigError, LeakbenchError
from leakbench.core.inversion import InversionConfig
from leakbench.core.limits import MAX_CELLS, MAX_GRID_IMAGES, check_depth, check_int, check_seed, check_width
from leakbench.core.settings import build_config
from leakbench.datasets import data_fingerprint
from leakbench.models import VICTIMS, architecture, default_depth, known_arch, victim_label
from leakbench.models.training import TrainRecipe, cell_seeded, check_epochs, split_cell_seed
from leakbench.records.folders import folder_name

SUITES: Traversable = files("leakbench.suites")
"""The shipped suites (package data): NAME.toml, and paper/NAME.toml (`leakbench reproduce`)."""
SUITE_NAME = re.compile(r"^(paper/)?[A-Za-z0-9][\w.-]*$")
"""A shipped suite's name: a file stem, or paper/STEM."""
SETTING_KEYS = {"name": str, "description": str, "width": int, "depth": int, "image_size": int, "data_root": str,
                "hyperparameters": dict, "grid_images": int, "grid_seed": int, "arch": str, "inversion": dict,
                "plugins": list, "dataset_plugins": list, "defence_plugins": list, "victim_plugins": list,
                "train": dict, "noise_scale": str, "adaptive_only": bool}
"""The suite's keys that are not axes (those are declared in `leakbench.cell.axes.AXES`)."""


def suite_keys() -> dict[str, type]:
    """Every key a suite may give, with its TOML type: its settings and the keys of its axes."""
    return {**SETTING_KEYS, **key_types()}


KEYS = suite_keys()
"""The keys of `suite_keys` when this module was loaded."""
REQUIRED = ("name", "attacks", "batch_sizes")
MODEL_KEYS = {"arch": str, "width": int, "depth": int, "train_epochs": int}
DEFAULT_GRID_IMAGES = 8

@dataclass(frozen=True)
class Victim:
    """One victim model of a suite (its training epochs are an axis of their own): architecture, width, depth."""

    arch: str
    width: int
    depth: int

    def label(self) -> str:
        return victim_label(self.arch, self.depth, self.width)


@dataclass(frozen=True)
class Suite:
    """A parsed suite: its cells in a fixed order, and how grids pick their images."""

    name: str
    cells: list[CellSpec]
    grid_seed: int = 0
    grid_images: int = DEFAULT_GRID_IMAGES
    text: str = ""
    layerless: tuple[str, ...] = field(default_factory=tuple)
    """Attacks the layer axis does not apply to (run with layer 1 only)."""


def find_suite(name_or_path: str | None) -> Path | Traversable:
    """A suite file: an existing file, else the shipped suite of that name (`leakbench list suites`); default
    `default`."""
    candidate = Path(name_or_path or "default")
    if candidate.is_file():
        return candidate
    shipped = shipped_suite(name_or_path or "default")
    if shipped is None:
        raise ConfigError(f"no suite {name_or_path!r}: no file {candidate} and no shipped suite of that name "
                          "(see `leakbench list suites`)")
    return shipped


def shipped_suite(name: str) -> Traversable | None:
    """The shipped suite `name` (`default`, `paper/dp`, …), or None when there is none."""
    if not SUITE_NAME.match(name):
        return None
    folder, _, stem = name.rpartition("/")
    path = (SUITES / folder if folder else SUITES) / f"{stem}.toml"
    return path if path.is_file() else None


def list_suites() -> list[tuple[str, str]]:
    """(name, description) of every shipped suite, paper/ ones after the others."""
    found = []
    for prefix, folder in (("", SUITES), ("paper/", SUITES / "paper")):
        for item in sorted(folder.iterdir(), key=lambda t: t.name):
            if item.name.endswith(".toml"):
                raw = tomllib.loads(item.read_text())
                found.append((prefix + item.name.removesuffix(".toml"), str(raw.get("description", ""))))
    return found


def load_suite(path: Path | Traversable, *, data_root: str | None = None) -> Suite:
    """Parse and validate a suite file into its cells: datasets × attacks × models, each crossed with the
    levels of the other axes (`leakbench.cell.axes.AXES`, in that order)."""
    try:
        text = path.read_text()
        raw = tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"suite {path}: {exc}".replace("\n", " ")) from None
    try:
        _load_plugins(raw)
        _validate(raw)
        levels = {a.key: a.levels(raw) for a in all_axes() if a.scope == "cell"}
        inversion = table(raw["inversion"], "key 'inversion'", InversionConfig) if "inversion" in raw else None
        train_table, per_cell = split_cell_seed(raw["train"], "key 'train'") if "train" in raw else ({}, False)
        recipe = table(train_table, "key 'train'", TrainRecipe) if "train" in raw else TrainRecipe()
        victims = _victims(raw)
        layers = {v: _victim_layers(raw, v) for v in victims}
        if "train" in raw and not any(e for epochs in victims.values() for e in epochs):
            raise ConfigError("key 'train' (a training recipe) needs key 'train_epochs' with a value ≥ 1")
        layerless = tuple(a for a in raw["attacks"] if not _has_layer(a))
        for one in all_axes():
            one.check_unique(levels[one.key] if one.scope == "cell" else raw.get(one.key, []))
    except LeakbenchError as exc:
        raise ConfigError(f"suite {path}: {exc}") from None
    params = raw.get("hyperparameters", {})
    datasets = raw.get("datasets") or [raw["dataset"]]
    fields = {key: [axis(key).level_fields(level) for level in values] for key, values in levels.items()}

    def crossing(attack: str, v: Victim) -> list[list[Fields]]:
        """The levels crossed for `attack` on victim `v`, as cell fields, outermost axis first: the attack's
        layers in the model (layer 1 only for an attack without a layer setting), the model's epochs."""
        layer_levels = [1] if attack in layerless else layers[v]
        per_victim: dict[str, list[Fields]] = {
            "layers": [{"layer": n} for n in layer_levels],
            "train_epochs": [{"train_epochs": e, "recipe": recipe if e else None} for e in victims[v]]}
        return [per_victim[a.key] if a.scope == "victim" else fields[a.key] for a in crossed()]

    outer = list(product(datasets, raw["attacks"], victims))
    count = sum(math.prod(len(levels) for levels in crossing(attack, v)) for _, attack, v in outer)
    if count > MAX_CELLS:  # refused before expanding, checking or running anything
        raise ConfigError(f"suite {path}: expands to {count:,} cells, more than the {MAX_CELLS:,} a suite may hold; "
                          "split it into several suites")
    root = data_root or raw.get("data_root")
    fingerprints = {dataset: data_fingerprint(dataset, root) for dataset in datasets}  # each folder read once
    cells = []
    for dataset, attack, v in outer:
        for combination in product(*crossing(attack, v)):
            cell = {k: value for level in combination for k, value in level.items()}  # later axes win: defences
            if per_cell and cell.get("recipe") is not None:  # train = { seed = "cell" }: the cell's own training
                cell["recipe"] = cell_seeded(cell["recipe"], cell.get("seed", 0))
            cells.append(CellSpec(**cell, attack=attack, dataset=dataset, width=v.width, depth=v.depth, arch=v.arch,
                                  data_root=root, data_fingerprint=fingerprints[dataset],
                                  image_size=raw.get("image_size"),
                                  hyperparameters=dict(params.get(attack, {})),
                                  inversion=None if attack in layerless else inversion))
    if raw.get("adaptive_only"):
        cells = [c for c in cells if adapts_here(c)]
    _unique_cells(cells, path)
    _inversion_applies(inversion, cells, path)
    return Suite(name=raw["name"], cells=cells, grid_seed=raw.get("grid_seed", 0),
                 grid_images=raw.get("grid_images", DEFAULT_GRID_IMAGES), text=text, layerless=layerless)


def _load_plugins(raw: dict[str, Any]) -> None:
    """Load the modules of keys 'plugins' (attack plugins: imported only in the sandboxed attack
    worker) and 'dataset_plugins' (imported here: dataset code runs beside the data), before the
    attack and dataset names are checked: they may register some."""
    from leakbench.plugins import load_client_plugin, load_plugin

    for key, load in (("dataset_plugins", load_client_plugin), ("defence_plugins", load_client_plugin),
                      ("victim_plugins", load_client_plugin), ("plugins", load_plugin)):
        modules = raw.get(key, [])
        if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
            raise ConfigError(f"key '{key}' must list module paths, like [\"package.module\"]")
        for module in modules:
            load(module)


def _unique_cells(cells: list[CellSpec], path: Path | Traversable) -> None:
    """Refuse a plan holding one cell twice, however the axes produced it (one id, one folder, one row)."""
    seen: set[str] = set()
    for spec in cells:
        cid = cell_id(spec)
        if cid in seen:
            raise ConfigError(f"suite {path}: the plan holds cell {cid} ({spec.attack} b={spec.batch_size} "
                              f"layer {spec.layer} seed {spec.seed}) twice")
        seen.add(cid)


def _inversion_applies(inversion: InversionConfig | None, cells: list[CellSpec], path: Path | Traversable) -> None:
    """Refuse key 'inversion' when no cell recovers features to invert (every cell at layer 1, or of
    an attack without a layer setting): it would do nothing."""
    if inversion is not None and inversion.steps and not any(inverts(c.attack, c.layer) for c in cells):
        raise ConfigError(f"suite {path}: key 'inversion' inverts nothing: no cell attacks an inner layer with an "
                          "attack that has a layer setting (add 'layers' ≥ 2, or drop 'inversion')")


def adapts_here(spec: CellSpec) -> bool:
    """Whether `spec` is worth running in a suite with `adaptive_only = true`: its attack adapts to no defence
    (`Attack.adapts_to` empty: a plain attack, kept everywhere), or the attacker knows the defence and the
    cell's update holds a step the attack adapts to. Elsewhere an adaptive attack is its plain form, which
    the suite runs anyway, so the cell would only repeat it."""
    adapts = attack_class(spec.attack).adapts_to
    return not adapts or (spec.defence_known and any(step.name in adapts for step in spec.update))


def _has_layer(attack: str) -> bool:
    return attack_class(attack).layered


def _validate(raw: dict[str, Any]) -> None:
    keys = suite_keys()
    for key in raw:
        if key not in keys:
            raise ConfigError(f"unknown key {key!r} (known: {', '.join(sorted(keys))})")
        if not isinstance(raw[key], keys[key]) or (isinstance(raw[key], bool) and keys[key] is not bool):
            kinds = {int: "an integer", str: "a string", list: "a list", dict: "a table", bool: "true or false"}
            kind = kinds[keys[key]]
            shown = f", got {raw[key]!r}" if isinstance(raw[key], (int, float)) else ""  # 1e400 parses as inf
            raise ConfigError(f"key {key!r} must be {kind}{shown}")
    for key in REQUIRED:
        if key not in raw:
            raise ConfigError(f"missing key {key!r}")
    folder_name(raw["name"], "key 'name'")
    if ("dataset" in raw) == ("datasets" in raw):
        raise ConfigError("exactly one of key 'dataset' or key 'datasets' must be given")
    if "layer" in raw and "layers" in raw:
        raise ConfigError("give key 'layer' or key 'layers', not both")
    if "defences" in raw and any(key in raw for key in ("dp", "fedavg", "noise")):
        raise ConfigError("give the update's settings in key 'defences' or in keys 'dp' / 'fedavg' / 'noise', "
                          "not both")
    check_lists(raw)  # each axis list: names, integers ≥ 0 or at least one level
    if "width" in raw:
        check_width(raw["width"], "key 'width'")
    if "depth" in raw:
        check_depth(raw["depth"], "key 'depth'")
    _check_arch(raw.get("arch", "fc"), "key 'arch'")
    if "dp" in raw and "fedavg" in raw:
        raise ConfigError("a suite sweeps either 'dp' or 'fedavg', not both")
    if "dp" in raw and any(raw.get("noise", [])):
        raise ConfigError("a suite adds plain 'noise' or sweeps 'dp' (which adds its own), not both")
    check_int(raw.get("grid_images", 1), "key 'grid_images'", 1, MAX_GRID_IMAGES)
    if "noise_scale" in raw and not any(raw.get("noise", [])):
        raise ConfigError("key 'noise_scale' needs key 'noise' with a level above 0 (without one it scales nothing)")
    check_seed(raw.get("grid_seed", 0), "key 'grid_seed'")
    for attack in raw["attacks"]:
        attack_class(attack)  # unknown attack: ConfigError naming it
    for attack, settings in raw.get("hyperparameters", {}).items():
        if attack not in raw["attacks"] or not isinstance(settings, dict):
            raise ConfigError(f"key 'hyperparameters.{attack}' must be a table for a listed attack")
        if "layer" in settings:
            raise ConfigError(f"key 'hyperparameters.{attack}.layer': set the attacked layer with 'layers'")
        try:  # types, ranges and nested options (spear-guided's guide and guide_options) at parse time
            build_config(attack_class(attack).Config, settings)
        except ConfigError as exc:
            raise ConfigError(f"key 'hyperparameters.{attack}': {exc}") from None


def _check_arch(arch: Any, where: str) -> str:
    if not isinstance(arch, str) or not known_arch(arch):
        raise ConfigError(f"{where} must be one of {', '.join(VICTIMS.names())}, got {arch!r}")
    return arch


def _victims(raw: dict[str, Any]) -> dict[Victim, list[int]]:
    """The suite's victim models, in order, each with its training epochs: the top-level model with
    `train_epochs`, or the entries of `models` (an entry without `train_epochs` takes the top-level list)."""
    epochs: list[int] = axis("train_epochs").levels(raw)
    arch = raw.get("arch", "fc")
    if "models" not in raw:
        return {Victim(arch, raw.get("width", 200), raw.get("depth", default_depth(arch))): epochs}
    if not raw["models"]:
        raise ConfigError("key 'models' must list at least one model, like [{width = 200, depth = 6}]")
    victims: dict[Victim, list[int]] = {}
    for i, entry in enumerate(raw["models"]):
        where = f"key 'models[{i}]'"
        victim, model_epochs = _model_entry(entry, where, raw, epochs)
        for e in model_epochs:
            if e in victims.get(victim, []):
                raise ConfigError(f"key 'models' lists {victim.label()}" + (f" trained {e} epochs" if e else "")
                                  + " twice")
            victims.setdefault(victim, []).append(e)
    return victims


def _model_entry(entry: Any, where: str, raw: dict[str, Any], epochs: list[int]) -> tuple[Victim, list[int]]:
    """One table of `models`: its victim (keys it leaves out from the top level) and training epochs."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table with some of {', '.join(MODEL_KEYS)}")
    for key, val in entry.items():
        if key not in MODEL_KEYS:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(MODEL_KEYS)})")
        if not isinstance(val, MODEL_KEYS[key]) or isinstance(val, bool):
            raise ConfigError(f"{where}: key {key!r} must be a {'string' if MODEL_KEYS[key] is str else 'integer'}")
    if "train_epochs" in entry and "train_epochs" in raw:
        raise ConfigError(f"{where}: key 'train_epochs' is given per model and as the suite's axis; give one of them")
    arch = _check_arch(entry.get("arch", raw.get("arch", "fc")), f"{where}: key 'arch'")
    width = check_width(entry.get("width", raw.get("width", 200)), f"{where}: key 'width'")
    depth = check_depth(entry.get("depth", raw.get("depth", default_depth(arch))), f"{where}: key 'depth'")
    if "train_epochs" in entry:
        return Victim(arch, width, depth), [check_epochs(entry["train_epochs"], f"{where}: key 'train_epochs'")]
    return Victim(arch, width, depth), epochs


def _victim_layers(raw: dict[str, Any], victim: Victim) -> list[int]:
    """The layers attacked in `victim`: `layers` (or `layer`), each attackable there, else its first attackable one."""
    valid = architecture(victim.arch).attackable(victim.depth)
    layers = raw.get("layers") or [raw.get("layer", valid[0] if valid else 1)]
    for layer in layers:
        if valid and layer not in valid:
            raise ConfigError(f"key 'layers': layer {layer} is not attackable in {victim.arch} depth {victim.depth} "
                              f"(valid: {valid[0]}..{valid[-1]})")
    return layers


def plan_lines(suite: Suite) -> list[str]:
    """What `leakbench run SUITE --plan` prints: one line per cell (its id and settings), then the count."""
    lines = [f"{cell_id(spec)}  " + " ".join(cell_settings(spec, hyperparameters=True)) for spec in suite.cells]
    return [*lines, f"{len(suite.cells)} cells in suite {suite.name} (nothing run, nothing written)"]
