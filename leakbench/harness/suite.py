"""Suite files (shipped: leakbench/suites/*.toml; or a user's file) expanded into cells; a malformed file fails
before anything runs.

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
Every number of a `dp`, `fedavg`, `inversion` or `train` table and of `[hyperparameters.X]` has a
declared range (`leakbench.ranges`; `leakbench show attack X` prints an attack's).
`train_epochs = [0, 1, 5]` is the victim axis: 0 is the victim at init, N > 0 trains it N epochs
(recipe: the optional table `train = {optimizer, lr, momentum, batch_size, weight_decay, augment,
seed}`, else `TrainRecipe`'s defaults) on the dataset's train part, attacking batches of its attack part.

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
registered update transform (`leakbench.fl.transform`: `dp`, `fedavg`, `noise`, `mixup`, `secagg`, or
a defence from a plugin) with its settings, or a list of such tables, applied in order after the
client's update:

    defences = ["none", { name = "noise", sigma = 1e-4, scale = "max" }, { name = "dp", sigma = 1e-2, clip = 1.0 },
                [{ name = "noise", sigma = 1e-6 }, { name = "prune", keep = 0.1 }], { name = "secagg", clients = 4 }]

A level names at most one client transform (one that computes the update: `dp`, `fedavg`, `mixup`,
`secagg`, a plugin's): it replaces the FedSGD client and runs first. `secagg` with K clients gives
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

import re
import tomllib
from dataclasses import dataclass, field
from importlib.resources import files
from importlib.resources.abc import Traversable
from itertools import product
from pathlib import Path
from typing import Any, TypeVar

from leakbench.attacks import attack_class
from leakbench.attacks.inversion import inverts
from leakbench.datasets import data_fingerprint
from leakbench.errors import ConfigError, LeakbenchError
from leakbench.fl.dp import DPConfig
from leakbench.fl.fedavg import FedAvgConfig
from leakbench.fl.noise import check_noise
from leakbench.fl.transform import TRANSFORMS, DefenceSetting, transform_class
from leakbench.fl.update import ThreatModel
from leakbench.harness.limits import MAX_CELLS, MAX_GRID_IMAGES, check_depth, check_int, check_seed, check_width
from leakbench.harness.spec import CellSpec, cell_id, cell_settings
from leakbench.inversion import InversionConfig
from leakbench.models import VICTIMS, architecture, default_depth, known_arch, victim_label
from leakbench.models.training import TrainRecipe, check_epochs
from leakbench.records.folders import folder_name
from leakbench.settings import build_config

SUITES: Traversable = files("leakbench.suites")
"""The shipped suites (package data): NAME.toml, and paper/NAME.toml (`leakbench reproduce`)."""
SUITE_NAME = re.compile(r"^(paper/)?[A-Za-z0-9][\w.-]*$")
"""A shipped suite's name: a file stem, or paper/STEM."""
KEYS = {"name": str, "description": str, "dataset": str, "datasets": list, "attacks": list,
        "batch_sizes": list, "layers": list, "layer": int, "seeds": list, "dp": list, "width": int,
        "depth": int, "image_size": int, "data_root": str, "hyperparameters": dict, "grid_images": int,
        "grid_seed": int, "arch": str, "fedavg": list, "inversion": dict, "plugins": list, "dataset_plugins": list,
        "defence_plugins": list, "victim_plugins": list, "defences": list,
        "train_epochs": list, "train": dict,
        "threat": list, "noise": list, "noise_scale": str, "models": list}
REQUIRED = ("name", "attacks", "batch_sizes")
INT_LISTS = ("batch_sizes", "layers", "seeds", "train_epochs")
THREAT_KEYS = {"labels": ("known", "withheld"), "batch_size": ("known", "estimated"), "bn": ("eval", "train"),
               "bn_stats": ("private", "shared"), "defence": ("known", "unknown")}
MODEL_KEYS = {"arch": str, "width": int, "depth": int, "train_epochs": int}
DEFAULT_GRID_IMAGES = 8

C = TypeVar("C")
"""A settings dataclass (a `dp`, `fedavg`, `inversion` or `train` table)."""


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
    """Parse and validate a suite file into its cells (datasets × attacks × models × batch sizes × layers × DP
    × clients × threats × noise × seeds × train epochs)."""
    try:
        text = path.read_text()
        raw = tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"suite {path}: {exc}".replace("\n", " ")) from None
    try:
        _load_plugins(raw)
        _validate(raw)
        dp_levels = [_dp_level(v, i) for i, v in enumerate(raw.get("dp", ["none"]))]
        fedavg_levels = [_fedavg_level(v, i) for i, v in enumerate(raw.get("fedavg", ["none"]))]
        inversion = _table(raw["inversion"], "key 'inversion'", InversionConfig) \
            if "inversion" in raw else None
        recipe = _table(raw["train"], "key 'train'", TrainRecipe) if "train" in raw else TrainRecipe()
        victims = _victims(raw)
        layers = {v: _victim_layers(raw, v) for v in victims}
        if "train" in raw and not any(e for epochs in victims.values() for e in epochs):
            raise ConfigError("key 'train' (a training recipe) needs key 'train_epochs' with a value ≥ 1")
        threats = [_threat_level(v, i) for i, v in enumerate(raw.get("threat", ["default"]))]
        noises = [_noise_level(v, i, raw.get("noise_scale", "absolute")) for i, v in enumerate(raw.get("noise", [0.0]))]
        defences = [_defence_level(v, i) for i, v in enumerate(raw.get("defences", ["none"]))]
        layerless = tuple(a for a in raw["attacks"] if not _has_layer(a))
        _no_duplicates({**raw, "dp": dp_levels, "fedavg": fedavg_levels, "threat": threats, "noise": noises,
                        "defences": [tuple(sorted(d.items())) for d in defences]})
    except LeakbenchError as exc:
        raise ConfigError(f"suite {path}: {exc}") from None
    params = raw.get("hyperparameters", {})
    datasets = raw.get("datasets") or [raw["dataset"]]
    per_batch = sum((1 if a in layerless else len(layers[v])) * len(epochs) for a in raw["attacks"]
                    for v, epochs in victims.items())
    count = len(datasets) * per_batch * len(raw["batch_sizes"]) * len(dp_levels) * len(fedavg_levels) \
        * len(raw.get("seeds", [0])) * len(threats) * len(noises) * len(defences)
    if count > MAX_CELLS:  # refused before expanding, checking or running anything
        raise ConfigError(f"suite {path}: expands to {count:,} cells, more than the {MAX_CELLS:,} a suite may hold; "
                          "split it into several suites")
    root = data_root or raw.get("data_root")
    fingerprints = {dataset: data_fingerprint(dataset, root) for dataset in datasets}  # each folder read once
    cells = []
    for dataset, attack, v in product(datasets, raw["attacks"], victims):
        model_layers = layers[v][:1] if attack in layerless else layers[v]  # no layer setting: once per model
        for b, layer, dp, fedavg, threat, noise, defence, seed, train_epochs in product(
                raw["batch_sizes"], model_layers, dp_levels, fedavg_levels, threats, noises, defences,
                raw.get("seeds", [0]), victims[v]):
            update = {"dp": dp, "fedavg": fedavg, "noise": noise, "noise_scale": raw.get("noise_scale", "absolute"),
                      **defence}
            cells.append(CellSpec(**update,
                attack=attack, dataset=dataset, batch_size=b, seed=seed, width=v.width, depth=v.depth,
                layer=1 if attack in layerless else layer, data_root=root, data_fingerprint=fingerprints[dataset],
                image_size=raw.get("image_size"), hyperparameters=dict(params.get(attack, {})), arch=v.arch,
                inversion=None if attack in layerless else inversion, train_epochs=train_epochs,
                recipe=recipe if train_epochs else None, labels_known=threat.labels_known,
                batch_size_known=threat.batch_size_known, bn_mode=threat.bn_mode,
                bn_stats_shared=threat.bn_stats_shared, defence_known=threat.defence_known))
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


def _no_duplicates(axes: dict[str, Any]) -> None:
    """Refuse an axis that lists one value twice (its cells would run, and be stored, twice)."""
    for key in ("datasets", "attacks", "batch_sizes", "layers", "seeds", "dp", "fedavg", "train_epochs", "threat",
                "noise", "defences"):
        seen: set[Any] = set()  # levels are frozen dataclasses or None: hashable; linear in the axis length
        for value in axes.get(key, []):
            if value in seen:
                raise ConfigError(f"key {key!r} lists {'none' if value is None else repr(value)} twice")
            seen.add(value)


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


def _has_layer(attack: str) -> bool:
    return attack_class(attack).layered


def _validate(raw: dict[str, Any]) -> None:
    for key in raw:
        if key not in KEYS:
            raise ConfigError(f"unknown key {key!r} (known: {', '.join(sorted(KEYS))})")
        if not isinstance(raw[key], KEYS[key]) or isinstance(raw[key], bool):
            kind = {int: "an integer", str: "a string", list: "a list", dict: "a table"}[KEYS[key]]
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
    for key in ("dp", "fedavg", "threat", "noise", "defences"):
        if key in raw and not raw[key]:
            none = {"threat": '"default"', "noise": "0.0"}.get(key, '"none"')
            raise ConfigError(f"key {key!r} must list at least one level ({none} for none)")
    for key in ("attacks", "datasets"):
        if key in raw and (not raw[key] or not all(isinstance(v, str) for v in raw[key])):
            raise ConfigError(f"key {key!r} must list names")
    for key in INT_LISTS:
        values = raw.get(key, [1])
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
            raise ConfigError(f"key {key!r} must list integers ≥ 0")
    for i, seed in enumerate(raw.get("seeds", [])):
        check_seed(seed, f"key 'seeds[{i}]'")
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
    for attack, table in raw.get("hyperparameters", {}).items():
        if attack not in raw["attacks"] or not isinstance(table, dict):
            raise ConfigError(f"key 'hyperparameters.{attack}' must be a table for a listed attack")
        if "layer" in table:
            raise ConfigError(f"key 'hyperparameters.{attack}.layer': set the attacked layer with 'layers'")
        try:  # types, ranges and nested options (spear-guided's guide and guide_options) at parse time
            build_config(attack_class(attack).Config, table)
        except ConfigError as exc:
            raise ConfigError(f"key 'hyperparameters.{attack}': {exc}") from None


def _check_arch(arch: Any, where: str) -> str:
    if not isinstance(arch, str) or not known_arch(arch):
        raise ConfigError(f"{where} must be one of {', '.join(VICTIMS.names())}, got {arch!r}")
    return arch


def _victims(raw: dict[str, Any]) -> dict[Victim, list[int]]:
    """The suite's victim models, in order, each with its training epochs: the top-level model with
    `train_epochs`, or the entries of `models` (an entry without `train_epochs` takes the top-level list)."""
    epochs = [check_epochs(e, f"key 'train_epochs[{i}]'") for i, e in enumerate(raw.get("train_epochs", [0]))]
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


def _dp_level(value: Any, index: int) -> DPConfig | None:
    """One entry of `dp`: "none" or a table {sigma, clip[, delta, q, steps]}."""
    return _level(value, f"key 'dp[{index}]'", "sigma and clip", DPConfig)


def _threat_level(value: Any, index: int) -> ThreatModel:
    """One entry of `threat`: "default" or a table {labels = "known"|"withheld", batch_size = "known"|"estimated",
    defence = "known"|"unknown"}."""
    where = f"key 'threat[{index}]'"
    if value == "default":
        return ThreatModel()
    if not isinstance(value, dict) or not value:
        raise ConfigError(f"{where} must be \"default\" or a table with labels and/or batch_size")
    for key, val in value.items():
        if key not in THREAT_KEYS or val not in THREAT_KEYS[key]:
            known = "; ".join(f"{k} = {' | '.join(map(repr, v))}" for k, v in THREAT_KEYS.items())
            raise ConfigError(f"{where}: {key} = {val!r} is not a threat setting (known: {known})")
    return ThreatModel(batch_size_known=value.get("batch_size", "known") == "known",
                       labels_known=value.get("labels", "withheld") == "known", bn_mode=value.get("bn", "eval"),
                       bn_stats_shared=value.get("bn_stats", "private") == "shared",
                       defence_known=value.get("defence", "unknown") == "known")


def _noise_level(value: Any, index: int, scale: Any) -> float:
    """One entry of `noise`: a number σ in [0, 10^6] (0 is no noise; `ranges.MAX_NOISE_STD`)."""
    try:
        check_noise(value, scale)
    except ConfigError as exc:
        raise ConfigError(f"key 'noise[{index}]': {exc}") from None
    return float(value)


def _defence_level(value: Any, index: int) -> dict[str, Any]:
    """One entry of `defences`: "none", a table {name = "...", settings...} or a list of such tables
    (applied in order), as the cell fields it sets (`defence_fields`)."""
    where = f"key 'defences[{index}]'"
    if value == "none":
        return {}
    tables = value if isinstance(value, list) else [value]
    return defence_fields(tables, [f"{where}[{i}]" if isinstance(value, list) else where for i in range(len(tables))],
                          where)


def defence_fields(tables: list[Any], wheres: list[str], where: str) -> dict[str, Any]:
    """The cell fields that update transforms given as tables {name = "...", settings...} set, applied in
    order: `dp` and `fedavg` for those clients (the client computes the update: it runs first, wherever
    written), `defences` for every other step in the order written, the noise included (`CellSpec`
    keeps a noise step that comes before every defence as its `noise`, so those cells keep their ids:
    `spec.fold_noise`). `wheres` names each table in errors, `where` all of them (a suite's `defences`
    level, or `attack --defence`)."""
    fields: dict[str, Any] = {"defences": ()}
    clients: list[str] = []
    named: set[str] = set()
    for table, table_where in zip(tables, wheres, strict=True):
        name, config = _transform_table(table, table_where)
        if name in ("dp", "fedavg", "noise") and name in named:
            raise ConfigError(f"{where} names {name!r} twice")
        named.add(name)
        if name in ("dp", "fedavg") or transform_class(name).makes_update:
            clients.append(name)
        if name in ("dp", "fedavg"):
            fields[name] = config
        elif transform_class(name).makes_update:  # the client runs first
            fields["defences"] = (DefenceSetting(name, config), *fields["defences"])
        else:
            fields["defences"] += (DefenceSetting(name, config),)
    if len(clients) > 1:
        raise ConfigError(f"{where}: one client computes the update, not {len(clients)} ({', '.join(clients)})")
    if fields.get("dp") is not None and any(d.name == "noise" and d.config.sigma for d in fields["defences"]):
        raise ConfigError(f"{where}: DP-SGD runs alone (it adds its own noise; it is not FedAvg)")
    return fields


def _transform_table(table: Any, where: str) -> tuple[str, Any]:
    """A table {name = "...", settings...}: the transform's name and its Config, built by the same
    coercer as an attack's hyperparameters (types, declared ranges)."""
    if not isinstance(table, dict) or not isinstance(table.get("name"), str):
        raise ConfigError(f"{where} must be \"none\" or a table with a 'name' (known: {', '.join(TRANSFORMS.names())})")
    name = table["name"]
    cls = transform_class(name)
    if name == "fedsgd":
        raise ConfigError(f"{where}: {name!r} is the default client (FedSGD): leave it out")
    try:
        return name, build_config(cls.Config, {k: v for k, v in table.items() if k != "name"}, "key")
    except ConfigError as exc:
        raise ConfigError(f"{where} ({name}): {exc}") from None


def _fedavg_level(value: Any, index: int) -> FedAvgConfig | None:
    """One entry of `fedavg`: "none" (FedSGD) or a table {epochs, minibatch, lr}."""
    return _level(value, f"key 'fedavg[{index}]'", "epochs, minibatch, lr", FedAvgConfig)


def _level(value: Any, where: str, what: str, cls: type[C]) -> C | None:
    """"none" → None, or a table checked by `_table`."""
    if value == "none":
        return None
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be \"none\" or a table with {what}")
    return _table(value, where, cls)


def _table(value: Any, where: str, cls: type[C]) -> C:
    """A TOML table turned into the settings dataclass `cls` by the coercer of every Config
    (`leakbench.settings.build_config`: keys, types, declared ranges)."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a table")
    try:
        return build_config(cls, value, "key")
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def plan_lines(suite: Suite) -> list[str]:
    """What `leakbench run SUITE --plan` prints: one line per cell (its id and settings), then the count."""
    lines = [f"{cell_id(spec)}  " + " ".join(cell_settings(spec, hyperparameters=True)) for spec in suite.cells]
    return [*lines, f"{len(suite.cells)} cells in suite {suite.name} (nothing run, nothing written)"]
