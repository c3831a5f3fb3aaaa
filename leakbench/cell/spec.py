"""A cell's specification: what defines one attack run, its id, its settings in words and its axes as record columns."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from leakbench.cell.axes import default_fields, record_columns, settings_words
from leakbench.core.errors import ConfigError
from leakbench.core.inversion import InversionConfig
from leakbench.core.limits import check_depth, check_int, check_seed, check_width
from leakbench.core.ranges import INT64
from leakbench.fl import DPConfig, FedAvgConfig
from leakbench.fl.dp import dp_columns
from leakbench.fl.fedavg import fedavg_columns
from leakbench.fl.noise import Noise, NoiseConfig, check_noise
from leakbench.fl.transform import (
    DefenceSetting,
    EmptyConfig,
    FedSGD,
    UpdateTransform,
    build_transforms,
    check_defences,
    check_retired,
    transform_class,
)
from leakbench.fl.update import ThreatModel
from leakbench.models import victim_label
from leakbench.models.training import TrainRecipe, check_epochs


@dataclass(frozen=True)
class CellSpec:
    """Everything that defines one attack run; `seed` drives the batch, the init and the client's noise
    (DP, FedAvg shuffling); the attack's seed is derived from the cell id (`cell.seeds.attack_seed`).

    `dp` None is plain FedSGD; a DPConfig makes the client run one DP-SGD step instead; a
    `fedavg` config makes it run local epochs and share the weight difference (not with DP).
    `arch` is the victim (a registered architecture: "fc", "conv", "resnet", plugins'); `inversion`
    (steps > 0) turns recovered features of an inner layer back into images, scored next to the
    feature metrics. `train_epochs` > 0 trains the victim first (`recipe`, the default TrainRecipe
    when not given) on the dataset's train part and attacks a batch of its attack part
    (`datasets.partition`); 0 is the victim at init. `labels_known` / `batch_size_known` /
    `defence_known` are the threat model (`ThreatModel`: what the update carries besides the
    gradients); `bn_mode` ("eval" | "train") and `bn_stats_shared` say how the client runs BatchNorm
    and whether its update carries the running statistics. `noise` σ > 0 adds Gaussian noise to the
    shared gradients (`fl.noise`;
    `noise_scale` "absolute" or "max"), drawn from `seed`; not with DP. `defences` are further
    registered update transforms (`leakbench.fl.transform`, plugins' too), applied after the noise,
    in order (`transforms`); the first may be a client transform (MixUp, secure aggregation, ...) that
    replaces FedSGD (not with `dp` or `fedavg`). `batch_size` is b, each client's batch: a client
    transform combining K clients makes the cell's ground truth K·b images (`truth_size`).

    The update the client shares is one ordered tuple, `update`: (transform name, settings) steps, its
    client first, then every defence in the order written. `dp`, `fedavg` and `noise`/`noise_scale`
    are its stored form (what cell ids hash, so ids of cells stored before `update` existed stay): a
    noise step that comes before every defence is kept as `noise`; a noise step written after a
    defence stays in `defences`, where it runs (`fold_noise`).

    `data_fingerprint` is the identity of the files the cell reads under `data_root`, for a dataset whose
    root is a user's own folder (`imagefolder`; `datasets.data_fingerprint`, set where suites and the CLI
    make cells): in the id, where `data_root` (a location) is not, so two folders never share ids and a
    moved one keeps them. None for every other dataset (its name says its data; its ids stay).
    """

    attack: str
    dataset: str
    batch_size: int
    seed: int = 0
    width: int = 200
    depth: int = 6
    layer: int = 1
    data_root: str | None = None
    image_size: int | None = None
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    dp: DPConfig | None = None
    arch: str = "fc"
    fedavg: FedAvgConfig | None = None
    inversion: InversionConfig | None = None
    train_epochs: int = 0
    recipe: TrainRecipe | None = None
    labels_known: bool = False
    batch_size_known: bool = True
    defence_known: bool = False
    noise: float = 0.0
    noise_scale: str = "absolute"
    defences: tuple[DefenceSetting, ...] = ()
    bn_mode: str = "eval"
    bn_stats_shared: bool = False
    data_fingerprint: str | None = None

    def __post_init__(self) -> None:
        check_numbers(self)
        check_fingerprint(self.data_fingerprint)
        check_epochs(self.train_epochs, "train_epochs")
        check_noise(self.noise, self.noise_scale)
        for defence in self.defences:
            defence.transform()  # a registered transform with its own Config, or a ConfigError
        check_defences(tuple(self.defences), "DP-SGD" if self.dp else "FedAvg" if self.fedavg else None)
        object.__setattr__(self, "defences", fold_noise(self))
        object.__setattr__(self, "noise", float(self.noise))  # 1 and 1.0 are one cell
        if not self.noise:
            object.__setattr__(self, "noise_scale", "absolute")  # σ = 0 is the plain update, whatever its scale
        if self.noise and self.dp is not None:
            raise ConfigError("a cell adds plain noise or runs DP-SGD (which adds its own), not both")
        if self.train_epochs and self.recipe is None:
            object.__setattr__(self, "recipe", TrainRecipe())  # the id names the recipe it was trained with
        if not self.train_epochs and self.recipe is not None:
            raise ConfigError("a training recipe needs train_epochs ≥ 1 (a victim at init is not trained)")
        if self.dp is not None and self.fedavg is not None:
            raise ConfigError("a cell runs either DP-SGD or FedAvg, not both")
        _ = self.threat  # bn_mode and bn_stats_shared checked (ThreatModel)
        if self.dp is not None and any(d.name == "noise" for d in self.defences):
            raise ConfigError("a cell adds plain noise or runs DP-SGD (which adds its own), not both")
        if self.dp is not None and any(d.transform().changes_victim for d in self.defences):
            raise ConfigError("DP-SGD's per-sample gradients cannot run a victim changed by a defence (PRECODE "
                              "samples noise in its forward pass): not with a dp level")
        if self.bn_mode == "train" and self.dp is not None:
            raise ConfigError("DP-SGD clips per-sample gradients, which BatchNorm in train mode mixes: "
                              "use bn_mode 'eval' with a dp level")

    @property
    def update(self) -> tuple[DefenceSetting, ...]:
        """The client's update as one ordered tuple of (transform name, settings) steps: the client (fedsgd,
        dp, fedavg or the client transform its defences start with), then every other step in the order it
        runs (the noise kept in `noise`, then `defences`)."""
        if self.defences and self.defences[0].makes_update:
            client, rest = self.defences[0], self.defences[1:]
        elif self.dp is not None:
            client, rest = DefenceSetting("dp", self.dp), self.defences
        elif self.fedavg is not None:
            client, rest = DefenceSetting("fedavg", self.fedavg), self.defences
        else:
            client, rest = DefenceSetting("fedsgd", EmptyConfig()), self.defences
        noise = (DefenceSetting("noise", NoiseConfig(self.noise, self.noise_scale)),) if self.noise else ()
        return (client, *noise, *rest)

    @property
    def threat(self) -> ThreatModel:
        """What the attacker is given besides the update and the model."""
        return ThreatModel(batch_size_known=self.batch_size_known, labels_known=self.labels_known,
                           bn_mode=self.bn_mode, bn_stats_shared=self.bn_stats_shared,
                           defence_known=self.defence_known)


def check_numbers(spec: CellSpec) -> None:
    """Raise one ConfigError line for the first integer field of `spec` of the wrong type or out of the
    range it can hold (whichever path made the spec: a suite, the command line, a stored manifest read
    back by `spec_from_dict`): seed in [0, 2^63), width and depth within the victims' bounds
    (`core.limits`), batch size, layer and image size in [1, 2^63). What each value means (a layer
    the victim has, an image size the dataset serves) is checked where it is used."""
    check_seed(spec.seed, "seed")
    check_width(spec.width, "width")
    check_depth(spec.depth, "depth")
    for name in ("batch_size", "layer", "image_size"):
        value = getattr(spec, name)
        if value is not None or name != "image_size":
            check_int(value, name.replace("_", " "), 1, INT64 - 1)


def check_fingerprint(fingerprint: object) -> None:
    """One ConfigError line unless `fingerprint` (a cell's `data_fingerprint`, maybe read from a stored
    manifest) is None or 16 lower-case hex digits (`datasets.data_fingerprint`)."""
    if fingerprint is not None and not (isinstance(fingerprint, str) and re.fullmatch(r"[0-9a-f]{16}", fingerprint)):
        raise ConfigError(f"data fingerprint must be 16 hex digits, got {fingerprint!r}")


def fold_noise(spec: CellSpec) -> tuple[DefenceSetting, ...]:
    """`spec.defences` in their stored form: a noise step with σ 0 dropped (no noise, the plain update);
    a noise step that comes before every defence (after a client transform only) moved into the cell's own
    `noise`/`noise_scale`, where it runs anyway and where cells stored before ordered updates keep it (so
    their ids stay); a noise step after a defence kept in place (it runs there). One ConfigError line for
    noise given twice (as `noise` and as a step, or as two steps)."""
    steps = [d for d in spec.defences if d.name != "noise" or d.config.sigma]
    noises = [i for i, d in enumerate(steps) if d.name == "noise"]
    if len(noises) + bool(spec.noise) > 1:
        raise ConfigError("a cell adds plain noise once, not twice (as its noise and as a defence, or twice a defence)")
    first = 1 if steps and transform_class(steps[0].name).makes_update else 0
    if noises and noises[0] == first:
        noise = steps.pop(first).config
        object.__setattr__(spec, "noise", float(noise.sigma))
        object.__setattr__(spec, "noise_scale", noise.scale)
    return tuple(steps)


NEW_FIELD_DEFAULTS = {"arch": "fc", "fedavg": None, "inversion": None, "train_epochs": 0, "recipe": None,
                      "labels_known": False, "batch_size_known": True, "noise": 0.0, "noise_scale": "absolute",
                      "defences": (), "bn_mode": "eval", "bn_stats_shared": False, "defence_known": False,
                      "data_fingerprint": None, **default_fields()}
"""Fields added after the first stored runs: left out of ids and manifests at these defaults (those of the axes
declared in `leakbench.cell.axes` after these: their default levels)."""


def cell_columns(spec: CellSpec) -> dict[str, Any]:
    """The axes of a cell as record columns (numbers as numbers; no DP: σ, C, q, δ NaN, ε ∞; a
    `data_fingerprint` only for a fingerprinted dataset, so other records stay as they were); those of an axis
    declared later (`cell.axes.record_columns`) only away from its default. (A malicious server's cells add
    `server`: `harness.scoring.scored_columns`.)"""
    return {"cell_id": cell_id(spec), "attack": spec.attack, "dataset": spec.dataset, "arch": spec.arch,
            "batch_size": spec.batch_size, "width": spec.width, "depth": spec.depth, "layer": spec.layer,
            "seed": spec.seed, **dp_columns(spec.dp, spec.batch_size), **fedavg_columns(spec.fedavg),
            "inversion_steps": spec.inversion.steps if spec.inversion else 0, **train_columns(spec),
            **threat_columns(spec), **defence_columns(spec), **record_columns(spec),
            **({"data_fingerprint": spec.data_fingerprint} if spec.data_fingerprint else {})}


def transforms(spec: CellSpec) -> list[UpdateTransform]:
    """The cell's update transforms in the order they run: its client (FedSGD, FedAvg, DP-SGD, or the
    client transform its defences start with), then every step of `spec.update` in order: the one place a
    cell's transforms are built (each holds only its frozen Config, so building them again is building
    the same list; nothing is cached on the spec, whose `__dict__` and pickles stay its fields)."""
    return build_transforms(spec.update)


def client_count(spec: CellSpec) -> int:
    """K, the number of clients whose private batches of `batch_size` images the cell's update combines
    (1 but for a client transform such as secure aggregation)."""
    return transforms(spec)[0].clients()


def truth_size(spec: CellSpec) -> int:
    """How many images the cell's ground truth holds: K·b (every client's batch), what is drawn
    (`cell.draw.draw_batch`), scored, fingerprinted, shown in grids and re-derived by
    `records.truth`. b for every cell of one client."""
    return spec.batch_size * client_count(spec)


def defence_columns(spec: CellSpec) -> dict[str, Any]:
    """The record columns of the cell's defences, and `defence`: the labels of every step after the client
    and the noise kept in `noise` (`noise_sigma`, named first by reports), in the order they run, joined by
    ' + '; none for a cell without any, so records of cells stored before defences existed stay as they
    were. A client transform among them (MixUp, secure aggregation) is the cell's `client` instead. A
    noise step after a defence is named in `defence` only (`noise_sigma` is the noise before them)."""
    if not spec.defences:
        return {}
    built = transforms(spec)
    later = defence_steps(spec, built)
    columns: dict[str, Any] = {"defence": " + ".join(t.label() for t in later)}
    own_client = spec.defences[0].makes_update
    if own_client:
        columns["client"] = built[0].label()  # in place of fedavg_columns' 'fedsgd'; reports add the defences to it
    for transform in [*built[:own_client], *later]:
        if not isinstance(transform, Noise):
            columns.update(transform.columns())
    return columns


def defence_steps(spec: CellSpec, built: list[UpdateTransform]) -> list[UpdateTransform]:
    """Of the cell's transforms `built` (`transforms(spec)`), those after its client and its `noise`: its
    defences, in the order they run."""
    return built[1 + bool(spec.noise):]


def threat_columns(spec: CellSpec) -> dict[str, Any]:
    """The threat model (what the attacker knew) and the additive noise on the update (σ 0: none)."""
    bn = {"bn_mode": spec.bn_mode, "bn_stats_shared": spec.bn_stats_shared} if spec.bn_mode != "eval" else {}
    return {"threat": spec.threat.label(), "labels_known": spec.labels_known,
            "batch_size_known": spec.batch_size_known,
            **({"defence_known": True} if spec.defence_known else {}),  # old records stay as they were
            **Noise(NoiseConfig(spec.noise, spec.noise_scale)).columns(), **bn}


def train_columns(spec: CellSpec) -> dict[str, Any]:
    """The victim's training axis: epochs (0 = at init) and the recipe's optimiser, lr and batch size."""
    r = spec.recipe
    return {"train_epochs": spec.train_epochs, "train_optimizer": r.optimizer if r else "",
            "train_lr": float(r.lr) if r else math.nan, "train_batch": r.batch_size if r else 0}






def cell_settings(spec: CellSpec, *, hyperparameters: bool = False) -> list[str]:
    """The cell's settings as short words ("b=16", "dp=σ=0.01 C=1", "train_epochs=5", ...): the plan's and the
    progress lines' description of a cell; the hyperparameters (as compact JSON) only when asked for."""
    settings = [spec.attack, spec.dataset, f"b={spec.batch_size}", victim_label(spec.arch, spec.depth, spec.width),
                f"layer={spec.layer}", f"dp={spec.dp.label() if spec.dp else 'none'}",
                f"client={_client_label(spec)}", f"seed={spec.seed}"]
    if spec.image_size is not None:
        settings.append(f"image_size={spec.image_size}")
    if spec.data_fingerprint:
        settings.append(f"data={spec.data_fingerprint[:8]}")  # which folder's files, as reports label them
    if spec.inversion is not None:
        settings.append(f"inversion_steps={spec.inversion.steps}")
    if spec.train_epochs:
        settings.append(f"train_epochs={spec.train_epochs}")
    if spec.threat != ThreatModel():
        settings.append(f"threat={spec.threat.label().replace(' ', '_').replace(',', '')}")
    if spec.noise:
        settings.append(f"noise={spec.noise:g}" + ("×max" if spec.noise_scale == "max" else ""))
    defences = defence_steps(spec, transforms(spec))  # a client is `client=` above, the noise `noise=`
    if defences:
        settings.append("defence=" + "+".join(d.label().replace(" ", "_") for d in defences))
    settings += settings_words(spec)  # the axes declared later, away from their defaults
    if hyperparameters and spec.hyperparameters:
        settings.append(json.dumps(spec.hyperparameters, sort_keys=True, separators=(",", ":")))
    return settings


def _client_label(spec: CellSpec) -> str:
    """'FedSGD' (also for one DP-SGD step: `dp=` says it), the FedAvg setting, or another client's label."""
    if spec.fedavg is not None:
        return spec.fedavg.label()
    client = transforms(spec)[0]
    return "FedSGD" if isinstance(client, FedSGD) or spec.dp is not None else client.label().replace(" ", "_")


def cell_id(spec: CellSpec) -> str:
    """A hash of the cell's full configuration (everything but `data_root`, which is only a location; a
    folder's files are named by its `data_fingerprint`)."""
    config = {k: v for k, v in spec_dict(spec).items() if k != "data_root"}
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def batch_id(spec: CellSpec) -> str:
    """A hash of what chooses the batch (dataset, image size, batch size, seed; the number of clients
    when above 1; the data fingerprint when there is one): the same for every attack, layer, DP level and
    client on that batch, so their grids can show the same images side by side."""
    config: dict[str, Any] = {"dataset": spec.dataset, "image_size": spec.image_size, "batch_size": spec.batch_size,
                              "seed": spec.seed}
    if spec.data_fingerprint:
        config["data"] = spec.data_fingerprint
    if client_count(spec) > 1:
        config["clients"] = client_count(spec)
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def spec_from_dict(data: dict[str, Any]) -> CellSpec:
    """The spec `spec_dict` wrote (as stored in a cell's manifest), every value checked as a suite's is
    (types and ranges: `check_numbers`, the Configs' declared ranges); anything else is one ConfigError line."""
    configs = {"dp": DPConfig, "fedavg": FedAvgConfig, "inversion": InversionConfig, "recipe": TrainRecipe}
    try:
        fields = {k: (configs[k](**v) if k in configs and v is not None else v) for k, v in data.items()}
        if "defences" in fields:
            for d in fields["defences"]:  # a cell stored by the transform that had the name before: one line
                check_retired(d["name"], d["config"])
            fields["defences"] = tuple(DefenceSetting(d["name"], transform_class(d["name"]).Config(**d["config"]))
                                       for d in fields["defences"])
        return CellSpec(**fields)
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        raise ConfigError(f"a stored cell spec is malformed ({type(exc).__name__}: {exc})".replace("\n", " ")) \
            from None


NEW_DP_DEFAULTS = {"convention": "opacus"}
"""Fields of DPConfig added after the first stored runs: left out of a cell's `dp` at these defaults."""


def spec_dict(spec: CellSpec) -> dict[str, Any]:
    """The spec as plain data; fields added later are left out at their defaults, so old ids stay valid."""
    data = {k: v for k, v in asdict(spec).items() if k not in NEW_FIELD_DEFAULTS or v != NEW_FIELD_DEFAULTS[k]}
    if data.get("dp") is not None:
        data["dp"] = {k: v for k, v in data["dp"].items() if k not in NEW_DP_DEFAULTS or v != NEW_DP_DEFAULTS[k]}
    return data
