"""A suite's axes, declared once: each `Axis` names its TOML key, how one level is parsed and checked,
the `CellSpec` fields a level sets, its record columns, its report label, whether its levels are kept apart
in tables, and its `leakbench attack` flag.

What derives from `AXES`: the suite's known keys and their types, the checks of every axis list (names,
integers ≥ 0, at least one level, no level twice), the cell count and the product of the levels in plan
order (`harness.suite.load_suite`), the `leakbench attack` flags of one-level axes (`cli`), the report's
per-axis tables ("By batch size b", …: `report_labels`), and, for an axis declared after the stored ones
(`legacy` False), its record columns, its word in plan lines and its default in stored ids
(`cell.spec.cell_columns`, `cell_settings`, `NEW_FIELD_DEFAULTS`).

A new axis is its declaration here, its `CellSpec` field (one line in `cell.spec`) and its consumer (the
code that reads the field): see docs/reference/suites.md, "Adding an axis".
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from leakbench.core.errors import ConfigError
from leakbench.core.limits import check_seed
from leakbench.core.settings import build_config

if TYPE_CHECKING:  # the parsers import these when called: `leakbench --help` builds its flags from `AXES`
    import pandas as pd

    from leakbench.fl.dp import DPConfig
    from leakbench.fl.fedavg import FedAvgConfig
    from leakbench.fl.update import ThreatModel

C = TypeVar("C")
"""A settings dataclass (a `dp`, `fedavg`, `inversion` or `train` table)."""
Fields = dict[str, Any]
"""The `CellSpec` fields one level of an axis sets."""
Parser = Callable[[Any, str, Mapping[str, Any]], Any]
"""One level of an axis from its TOML value (or a flag's): (value, where it was written, the whole suite)
→ the level, or a ConfigError naming `where`."""

THREAT_KEYS = {"labels": ("known", "withheld"), "batch_size": ("known", "estimated"), "bn": ("eval", "train"),
               "bn_stats": ("private", "shared"), "defence": ("known", "unknown")}
"""The settings of a `threat` table and their values."""


@dataclass(frozen=True)
class Flag:
    """The `leakbench attack` option that gives the one level of an axis a single cell runs at."""

    name: str
    """'--seed'; its argparse destination is the name without dashes ('seed')."""
    help: str
    type: Callable[[str], Any] = int
    default: Any = None
    required: bool = False

    @property
    def dest(self) -> str:
        return self.name.removeprefix("--").replace("-", "_")


def _same(value: Any, where: str, raw: Mapping[str, Any]) -> Any:
    return value


@dataclass(frozen=True)
class Axis:
    """One axis of a suite.

    `scope` says where its levels cross: "suite" axes (datasets, attacks, models) make the outer loops of
    the plan; "victim" axes (layers, train_epochs) have levels that depend on the model and attack, which
    `harness.suite` works out; "cell" axes cross every combination of the others, innermost in declaration
    order, each level setting `fields(level)` of the cell. `kind` is what the TOML list holds: "names",
    "integers" ≥ 0, "levels" (values or tables, at least one; `none` is the level that means none, named in
    that error) or "tables" (checked by the axis's own code: `models`). `apart`: its levels are different
    settings that tables never pool (False: repetitions of one setting, pooled: the seeds; every axis's
    levels are distinct cells with their own ids either way). `legacy`: an axis of the stored records, whose
    columns, plan words and report label `cell.spec` and `reporting.aggregate` write by hand (so stored
    tables stay byte-identical); an axis declared later gets those from here.
    """

    key: str
    """The TOML key ('batch_sizes')."""
    field: str
    """The `CellSpec` field a level sets (`fields` may set others beside it)."""
    label: str = ""
    """The report's name for it ('batch size b'); '' where `report` has its own axis or there is none."""
    report: str = ""
    """The cells column reports group it by ('client' for the update's axes); '' for none."""
    columns: tuple[str, ...] = ()
    """The record columns it sets (default: `field`)."""
    kind: str = "levels"
    none: str = '"none"'
    default: tuple[Any, ...] = ()
    """The levels of a suite that leaves the key out (their parsed fields are `CellSpec`'s defaults)."""
    parse: Parser = _same
    fields: Callable[[Any], Fields] | None = None
    """A parsed level's `CellSpec` fields; default {field: level}."""
    key_of: Callable[[Any], Hashable] | None = None
    """A parsed level as a hashable value (two levels equal here are one level twice); default the level."""
    scope: str = "cell"
    single: tuple[str, type] | None = None
    """The key and type of its one-level form ('dataset', a string; 'layer', an integer)."""
    flag: Flag | None = None
    apart: bool = True
    legacy: bool = True

    def levels(self, raw: Mapping[str, Any]) -> list[Any]:
        """The suite's levels of this axis, parsed, in order (`default` when the key is left out)."""
        values = raw.get(self.key, list(self.default))
        return [self.parse(value, f"key '{self.key}[{i}]'", raw) for i, value in enumerate(values)]

    def level_fields(self, level: Any) -> Fields:
        """The `CellSpec` fields `level` sets."""
        return self.fields(level) if self.fields is not None else {self.field: level}

    def record_columns(self) -> tuple[str, ...]:
        return self.columns or (self.field,)

    def check_list(self, values: Any) -> None:
        """Refuse a list of the wrong kind, or empty (one ConfigError line naming the key)."""
        if self.kind == "names" and (not values or not all(isinstance(v, str) for v in values)):
            raise ConfigError(f"key {self.key!r} must list names")
        if self.kind == "integers" and (not values or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)):
            raise ConfigError(f"key {self.key!r} must list integers ≥ 0")
        if self.kind == "levels" and not values:
            raise ConfigError(f"key {self.key!r} must list at least one level ({self.none} for none)")

    def check_unique(self, levels: Iterable[Any]) -> None:
        """Refuse a level listed twice (its cells would run, and be stored, twice); tables are checked by the
        axis's own parser (`harness.suite._victims` names a model listed twice)."""
        if self.kind == "tables":
            return
        seen: set[Hashable] = set()  # linear in the axis length
        for level in levels:
            value = self.key_of(level) if self.key_of is not None else level
            if value in seen:
                raise ConfigError(f"key {self.key!r} lists {'none' if value is None else repr(value)} twice")
            seen.add(value)


# --------------------------------------------------------------------------- level parsers


def table(value: Any, where: str, cls: type[C]) -> C:
    """A TOML table turned into the settings dataclass `cls` by the coercer of every Config
    (`leakbench.settings.build_config`: keys, types, declared ranges)."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a table")
    try:
        return build_config(cls, value, "key")
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _level(value: Any, where: str, what: str, cls: type[C]) -> C | None:
    """"none" → None, or a table checked by `table`."""
    if value == "none":
        return None
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be \"none\" or a table with {what}")
    return table(value, where, cls)


def dp_level(value: Any, where: str, raw: Mapping[str, Any]) -> DPConfig | None:
    """One entry of `dp`: "none" or a table {sigma, clip[, delta, q, steps]}."""
    from leakbench.fl.dp import DPConfig

    return _level(value, where, "sigma and clip", DPConfig)


def fedavg_level(value: Any, where: str, raw: Mapping[str, Any]) -> FedAvgConfig | None:
    """One entry of `fedavg`: "none" (FedSGD) or a table {epochs, minibatch, lr}."""
    from leakbench.fl.fedavg import FedAvgConfig

    return _level(value, where, "epochs, minibatch, lr", FedAvgConfig)


def threat_level(value: Any, where: str, raw: Mapping[str, Any]) -> ThreatModel:
    """One entry of `threat`: "default" or a table {labels = "known"|"withheld", batch_size = "known"|"estimated",
    bn, bn_stats, defence = "known"|"unknown"}."""
    from leakbench.fl.update import ThreatModel

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


def threat_fields(threat: ThreatModel) -> Fields:
    return {"labels_known": threat.labels_known, "batch_size_known": threat.batch_size_known,
            "bn_mode": threat.bn_mode, "bn_stats_shared": threat.bn_stats_shared,
            "defence_known": threat.defence_known}


def noise_level(value: Any, where: str, raw: Mapping[str, Any]) -> tuple[float, str]:
    """One entry of `noise`: a number σ in [0, 10^6] (0 is no noise; `ranges.MAX_NOISE_STD`), with the
    suite's `noise_scale`."""
    from leakbench.fl.noise import check_noise

    scale = raw.get("noise_scale", "absolute")
    try:
        check_noise(value, scale)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return float(value), scale


def defence_level(value: Any, where: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """One entry of `defences`: "none", a table {name = "...", settings...} or a list of such tables
    (applied in order), as the cell fields it sets (`defence_fields`)."""
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
    from leakbench.fl.transform import DefenceSetting, transform_class

    fields: dict[str, Any] = {"defences": ()}
    clients: list[str] = []
    named: set[str] = set()
    for one, table_where in zip(tables, wheres, strict=True):
        name, config = _transform_table(one, table_where)
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


def _transform_table(value: Any, where: str) -> tuple[str, Any]:
    """A table {name = "...", settings...}: the transform's name and its Config, built by the same
    coercer as an attack's hyperparameters (types, declared ranges)."""
    from leakbench.fl.transform import TRANSFORMS, check_retired, refuse_retired, transform_class

    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise ConfigError(f"{where} must be \"none\" or a table with a 'name' (known: {', '.join(TRANSFORMS.names())})")
    name = value["name"]
    refuse_retired(name)
    cls = transform_class(name)
    if name == "fedsgd":
        raise ConfigError(f"{where}: {name!r} is the default client (FedSGD): leave it out")
    try:
        check_retired(name, value)
        return name, build_config(cls.Config, {k: v for k, v in value.items() if k != "name"}, "key")
    except ConfigError as exc:
        raise ConfigError(f"{where} ({name}): {exc}") from None


def _seed(value: Any, where: str, raw: Mapping[str, Any]) -> int:
    return check_seed(value, where)


def _epochs(value: Any, where: str, raw: Mapping[str, Any]) -> int:
    from leakbench.models.training import check_epochs

    return check_epochs(value, where)


# --------------------------------------------------------------------------- the declaration

CLIENT = "client, defences and threat model"
MODEL = "victim model (architecture, width, training epochs)"

AXES: tuple[Axis, ...] = (
    Axis("datasets", "dataset", kind="names", scope="suite", single=("dataset", str),
         flag=Flag("--dataset", "registered dataset (default: embedded)", str, "embedded")),
    Axis("attacks", "attack", kind="names", scope="suite",
         flag=Flag("--attack", "registered attack (see `leakbench list attacks`)", str, required=True)),
    Axis("models", "arch", MODEL, "model", ("arch", "width", "depth"), kind="tables", scope="suite"),
    Axis("batch_sizes", "batch_size", "batch size b", "batch_size", kind="integers",
         flag=Flag("--batch-size", "each client's batch size b", required=True)),
    Axis("layers", "layer", "attacked layer", "layer", kind="integers", scope="victim", single=("layer", int),
         flag=Flag("--layer", "linear layer to attack (default 1 for fc, 2 for conv)")),
    Axis("dp", "dp", "DP level", "dp", ("dp", "dp_sigma", "dp_clip", "dp_delta", "dp_q", "dp_steps", "dp_epsilon",
                                      "dp_accountant"), default=("none",), parse=dp_level),
    Axis("fedavg", "fedavg", CLIENT, "client", ("client", "fedavg_epochs", "fedavg_minibatch", "fedavg_lr"),
         default=("none",), parse=fedavg_level),
    Axis("threat", "labels_known", CLIENT, "client", ("threat", "labels_known", "batch_size_known", "defence_known",
                                                     "bn_mode", "bn_stats_shared"),
         none='"default"', default=("default",), parse=threat_level, fields=threat_fields),
    Axis("noise", "noise", CLIENT, "client", ("noise_sigma", "noise_scale"), none="0.0", default=(0.0,),
         parse=noise_level, fields=lambda level: {"noise": level[0], "noise_scale": level[1]},
         key_of=lambda level: level[0]),
    Axis("defences", "defences", CLIENT, "client", ("defence", "client"), default=("none",), parse=defence_level,
         fields=dict, key_of=lambda level: tuple(sorted(level.items()))),
    Axis("seeds", "seed", kind="integers", default=(0,), parse=_seed, apart=False,
         flag=Flag("--seed", "seed of batch choice, init and attack, in [0, 2^63)", default=0)),
    Axis("train_epochs", "train_epochs", MODEL, "model", ("train_epochs", "train_optimizer", "train_lr", "train_batch"),
         kind="integers", default=(0,), parse=_epochs, scope="victim",
         flag=Flag("--train-epochs", "train the victim N epochs first, 0..1000 "
                                     "(default 0: at init; recipe: TrainRecipe's defaults)", default=0)),
)
"""Every axis of a suite, in plan order: the outer ones (dataset, attack, model), then the others from the
outermost to the innermost (a new axis goes last: with one level, the plan's order stays)."""


def all_axes() -> tuple[Axis, ...]:
    """`AXES` (read at each call: every derivation below follows the declaration as it is)."""
    return AXES


def axis(key: str) -> Axis:
    """The axis of TOML key `key`."""
    for one in all_axes():
        if one.key == key:
            return one
    raise KeyError(key)


def crossed() -> tuple[Axis, ...]:
    """The axes crossed within each (dataset, attack, model), outermost first: the product's order."""
    return tuple(a for a in all_axes() if a.scope != "suite")


def key_types() -> dict[str, type]:
    """The suite keys of the axes and their TOML types (lists; the one-level forms their own)."""
    types: dict[str, type] = {}
    for one in all_axes():
        types[one.key] = list
        if one.single is not None:
            types[one.single[0]] = one.single[1]
    return types


def check_lists(raw: Mapping[str, Any]) -> None:
    """Check every axis list the suite gives (`Axis.check_list`)."""
    for one in all_axes():
        if one.key in raw:
            one.check_list(raw[one.key])


def report_labels() -> dict[str, str]:
    """Report column → its label, one "By …" table each, in declaration order with the outer axes last."""
    labels: dict[str, str] = {}
    for one in (*crossed(), *(a for a in all_axes() if a.scope == "suite")):
        column = one.report or ("" if one.legacy else one.field)
        if column and one.label:
            labels.setdefault(column, one.label)
    return labels


def added() -> tuple[Axis, ...]:
    """The axes declared after the stored ones (`legacy` False): each records its `field` as a column of that
    name, away from its default (columns, plan words, report defaults and labels derive from here)."""
    return tuple(a for a in all_axes() if not a.legacy)


def default_fields(axes: Iterable[Axis] | None = None) -> Fields:
    """The `CellSpec` fields of the default levels of `axes` (default: `added()`): what a cell stored before
    the axis existed ran at, left out of its id (`cell.spec.NEW_FIELD_DEFAULTS`)."""
    fields: Fields = {}
    for one in added() if axes is None else axes:
        for level in one.levels({}):
            fields.update(one.level_fields(level))
    return fields


def _away(spec: Any) -> list[Axis]:
    """The `added()` axes at which the cell `spec` is away from its default."""
    defaults = default_fields()
    return [one for one in added() if getattr(spec, one.field) != defaults[one.field]]


def record_columns(spec: Any) -> dict[str, Any]:
    """The record columns of the `added()` axes of the cell `spec` away from their default (a cell at every
    default keeps the columns it had before these axes existed)."""
    return {one.field: getattr(spec, one.field) for one in _away(spec)}


def settings_words(spec: Any) -> list[str]:
    """The plan-line words ('client_lr=0.05') of the `added()` axes of `spec` away from their default."""
    return [f"{one.field}={getattr(spec, one.field)}" for one in _away(spec)]


def with_defaults(cells: pd.DataFrame) -> pd.DataFrame:
    """`cells` (a cells table) with the column of every `added()` axis, its default where a cell has none (a cell
    at the default stores none), so report tables can hold it at, or group by, a value."""
    defaults = default_fields()
    cells = cells.copy()
    for one in added():
        value = defaults[one.field]
        cells[one.field] = cells[one.field].where(cells[one.field].notna(), value) if one.field in cells else value
    return cells


def baselines() -> dict[str, Any]:
    """The value report tables hold each `added()` axis at while another axis varies: its default."""
    defaults = default_fields()
    return {one.field: defaults[one.field] for one in added() if one.apart}


def level_words(cells: pd.DataFrame) -> pd.Series:
    """Per cell (a row of a cells table, after `with_defaults`), ' · field=value' for every `added()` axis kept
    apart that is away from its default, '' for none: for the integrator to append to the label that keeps
    cells apart in pivots and the leaderboard (`reporting.aggregate.with_model`'s `client`)."""
    import pandas as pd

    words = pd.Series("", index=cells.index)
    defaults = default_fields()
    for one in added():
        if one.apart and one.field in cells:
            column = cells[one.field]
            words = words.where(column == defaults[one.field], words + f" · {one.field}=" + column.astype(str))
    return words


# --------------------------------------------------------------------------- `leakbench attack`


def flagged() -> tuple[Axis, ...]:
    """The axes with a `leakbench attack` flag, in declaration order."""
    return tuple(a for a in all_axes() if a.flag is not None)


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Add the flag of every `flagged()` axis to `parser` (`leakbench attack`)."""
    for one in flagged():
        assert one.flag is not None
        parser.add_argument(one.flag.name, type=one.flag.type, default=one.flag.default,
                            required=one.flag.required, help=one.flag.help)


def check_flags(args: argparse.Namespace) -> None:
    """Check each flag's value as its axis checks a level (its ConfigError names the flag)."""
    for one in flagged():
        assert one.flag is not None
        value = getattr(args, one.flag.dest)
        if value is not None:
            one.parse(value, one.flag.name, {})


def flag_fields(args: argparse.Namespace) -> Fields:
    """The `CellSpec` fields the flags of the `added()` axes give (the stored axes' flags are read by
    `cli.cmd_attack` itself: their defaults depend on other flags)."""
    fields: Fields = {}
    for one in added():
        if one.flag is not None:
            fields.update(one.level_fields(one.parse(getattr(args, one.flag.dest), one.flag.name, {})))
    return fields
