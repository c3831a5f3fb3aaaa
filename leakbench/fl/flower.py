"""Flower (`flwr`) as a leakbench client: one real Flower round, in process, and what its server received.

Issue 45. Four registered client transforms (levels of a suite's `defences`): `flower-fedsgd`, Flower's central DP
with client-side clipping `flower-dp-fixed` (the reply the server receives, or the noised aggregate it releases),
`flower-localdp` (`LocalDpMod`) and `flower-secaggplus` (SecAgg+); a capture mod for a user's own app is
`leakbench.fl.capture`. `fedsgd_round` runs one round of Flower's Simulation Runtime
(`flwr.simulation.run_simulation`, Message API: a `ServerApp` and a `ClientApp`) on this machine, with no
network: K virtual SuperNodes, client k holding the k-th private batch; the server sends the victim's
weights θ₀ (its `state_dict`) to every client, each client does one full-batch SGD step
θ₁ = θ₀ − η ∇L(θ₀) on its batch with leakbench's training loss (FedSGD) and returns θ₁, as a Flower client
returns its new weights (with its example count and partition id in a MetricRecord); the server records
exactly what it receives.

Why the client returns new weights and not the gradient: Flower's own defences read a client's reply as
weights (`fixedclipping_mod` and `LocalDpMod` clip θ₁ − θ₀; FedAvg and SecAgg+ average weights), so a
gradient in their place would be clipped and averaged as something it is not. The attack's gradient is
then (θ₀ − θ₁) / η (`as_gradients`): the arithmetic of leakbench's `fedavg` with one epoch over the whole
batch (which feeds the batch shuffled, so the two differ in the last bits), and the FedSGD gradient up to
the rounding of θ₀ − η g (about ε·max|θ₀| / η per entry: a larger η gives a closer gradient).

Flower's Simulation Runtime has one backend, Ray (`runtime="ray"`, the default): each call starts a local
Ray cluster (a GCS, a raylet and one worker process per client actor, on this host; about 10 s) and shuts
it down before returning. A process already connected to Ray (a leakbench `--executor ray` worker) is
refused: Flower's `ray.shutdown()` would end that connection. `runtime="inprocess"` runs the same
Simulation Runtime (its LinkState, in-memory Grid, ServerApp thread, message loop, the ClientApp and its
mods) with Ray's actor pool replaced by a backend that calls the ClientApp in this process (about 1 s); it
swaps a private Flower attribute for the duration of the round (`_in_process_backend`), so a new flwr may
break it where the Ray runtime still works. Flower's telemetry is turned off (`FLWR_TELEMETRY_ENABLED=0`).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import importlib.util
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from leakbench.core.citation import Citation
from leakbench.core.errors import ConfigError
from leakbench.core.limits import MAX_WIDTH
from leakbench.core.ranges import MAX_LR, Ranged, chosen, ranged
from leakbench.fl.fedavg import MAX_LOCAL_EPOCHS, FedAvgConfig, local_training
from leakbench.fl.secagg import MAX_CLIENTS
from leakbench.fl.transform import Client, UpdateTransform, register_transform
from leakbench.fl.update import ClientUpdate, ThreatModel

if TYPE_CHECKING:  # annotations only: importing the datasets package loads every loader
    from leakbench.datasets.base import Batch
    from leakbench.models.base import ImageVictim

MISSING = "the flower client needs flwr (Flower 1.42 or later 1.x): pip install 'leakbench[flower]'"
"""The one line a user gets when `flwr` cannot be imported."""

RUNTIMES = ("ray", "inprocess")
"""Where the simulated clients run: Flower's Ray backend, or this process (see the module's docstring)."""

NODE_WAIT_S = 120.0
"""How long the server waits for the simulated SuperNodes to register before it gives up (seconds)."""

Arrays = dict[str, torch.Tensor]
"""Named tensors: a state dict as Flower's `ArrayRecord` carries it."""

LocalTraining = Callable[[nn.Module, torch.Tensor, torch.Tensor], None]
"""A client's local training: the model (in place) on its partition's images and labels."""


def flower() -> ModuleType:
    """The `flwr` package, imported with Flower's telemetry off; one ConfigError line (MISSING) when it, or
    a module this prototype uses (the 1.42 layout; older releases are untested), cannot be imported."""
    os.environ["FLWR_TELEMETRY_ENABLED"] = "0"  # read at import, in this process and the Ray workers
    try:
        flwr = importlib.import_module("flwr")
        importlib.import_module("flwr.simulation")
        importlib.import_module("flwr.serverapp")
        telemetry = importlib.import_module("flwr.supercore.telemetry")
    except ImportError:
        raise ConfigError(MISSING) from None
    vars(telemetry)["FLWR_TELEMETRY_ENABLED"] = "0"  # imported earlier by someone else: off all the same
    return flwr


@dataclass(frozen=True)
class Received:
    """One reply the server received: the client's index (the partition id the client reports, 0 … K−1:
    leakbench's client order; the server itself knows only Flower node ids), the arrays it sent back (its
    new weights) and the example count it reported."""

    client: int
    arrays: Arrays
    num_examples: int
    message: Any = field(default=None, repr=False, compare=False)
    """The reply as Flower delivered it (a `flwr.app.Message`): what a Flower strategy aggregates (`released`)."""


@dataclass(frozen=True)
class FlowerRound:
    """One Flower round as the server saw it: the weights it sent, each reply it received (in client
    order), the flwr version and the round's wall time (on the Ray runtime, Ray's start and stop included)."""

    sent: Arrays
    received: tuple[Received, ...]
    version: str
    seconds: float


def fedsgd_round(model: nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], *, lr: float,
                 threat: ThreatModel = ThreatModel(), mods: Sequence[Any] = (),
                 config: Mapping[str, float] | None = None, seed: int = 0, runtime: str = "ray",
                 local: LocalTraining | None = None) -> FlowerRound:
    """Run one Flower round in which client k does one full-batch SGD step of rate `lr` on
    `batches[k]` (images, labels) from `model`'s weights, in the threat model's BatchNorm mode, and
    return what the server received. `model` is not modified.

    `mods`: Flower mods wrapping the client (`flwr.clientapp.mod`: `LocalDpMod(...)`, `fixedclipping_mod`),
    first outermost. `config`: a ConfigRecord sent beside the weights (`{"clipping_norm": C}` is what
    Flower's `DifferentialPrivacyClientSideFixedClipping` sends for `fixedclipping_mod`); None sends none.
    `seed`: client k seeds NumPy's generator with seed + k after its step, so a mod's noise is reproducible.
    `runtime`: one of RUNTIMES. `local`: the clients' training in place of the one SGD step (flower-fedavg's epochs)."""
    if not batches:
        raise ConfigError("a Flower round needs at least one client batch")
    flwr, sent, template, data = _round_inputs(model, batches, lr, runtime)
    replies: list[Received] = []
    errors: list[str] = []
    step = local or (lambda model, images, labels: _client_step(model, images, labels, lr))
    client_app = _client_app(template, data, step, threat.bn_mode == "train", mods, seed)
    server_app = _server_app(sent, len(data), replies, errors, config)
    seconds = simulate(server_app, client_app, len(data), runtime)
    if errors or len(replies) != len(data):
        raise RuntimeError(f"the Flower round returned {len(replies)} of {len(data)} replies"
                           + (f": {errors[0]}" if errors else ""))
    return FlowerRound(sent=sent, received=tuple(sorted(replies, key=lambda r: r.client)),
                       version=str(flwr.__version__), seconds=seconds)


def _round_inputs(model: nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float, runtime: str
                  ) -> tuple[ModuleType, Arrays, nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    """What both rounds start from, checked: flwr, the weights the server sends (copies), the clients' model
    template (a copy that takes gradients) and the clients' batches (copies)."""
    if not lr > 0:
        raise ConfigError(f"the Flower client's learning rate must be > 0, got {lr}")
    flwr = flower()
    _check_runtime(runtime)
    sent = {name: t.detach().clone() for name, t in model.state_dict().items()}
    template = copy.deepcopy(model).requires_grad_(True)
    data = [(images.detach().clone(), labels.detach().clone()) for images, labels in batches]
    return flwr, sent, template, data


@dataclass(frozen=True)
class SecAggPlusSettings:
    """Flower's `SecAggPlusWorkflow` settings (its defaults but `num_shares` and `reconstruction_threshold`,
    which Flower requires: here all clients share, and every share is needed). `max_weight`: the largest
    example count a client may weigh in with; each client scales its weights by round(n/max_weight · 2^22)/2^22
    before quantising them to `quantization_range` levels in ±`clipping_range`, so a small n against a large
    `max_weight` costs precision (Flower's default 1000 against b = 2: steps of ≈ 1.9e-3 in weight units)."""

    num_shares: float = 1.0
    reconstruction_threshold: float = 1.0
    max_weight: float = 1000.0
    clipping_range: float = 8.0
    quantization_range: int = 4194304
    modulus_range: int = 4294967296


@dataclass(frozen=True)
class SecAggPlusRound:
    """One Flower round under SecAgg+ as the server saw it: the weights it sent, the aggregate it unmasked
    (the example-weighted mean of the clients' new weights, as the float64 arrays Flower hands its strategy,
    in the order of `sent`), the example count of each client's reply, the settings, the flwr version and
    the round's wall time."""

    sent: Arrays
    aggregate: Arrays
    num_examples: tuple[int, ...]
    settings: SecAggPlusSettings
    version: str
    seconds: float


def secaggplus_round(model: nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], *, lr: float,
                     settings: SecAggPlusSettings = SecAggPlusSettings(), seed: int = 0,
                     threat: ThreatModel = ThreatModel(), runtime: str = "ray") -> SecAggPlusRound:
    """Run one Flower round under SecAgg+ (`secaggplus_mod` on each client, `SecAggPlusWorkflow` on the
    server, honest server, K = len(batches) clients): client k does one full-batch SGD step of rate `lr` on
    `batches[k]` and replies with its new weights; the server records the aggregate its strategy receives.
    `seed` seeds each client's NumPy generator (client k: seed + k), which Flower's stochastic rounding
    draws from, so the aggregate is reproducible. `runtime`: one of RUNTIMES. `model` is not modified."""
    if len(batches) < 2:
        raise ConfigError(f"SecAgg+ needs at least 2 clients, got {len(batches)}")
    flwr, sent, template, data = _round_inputs(model, batches, lr, runtime)
    record: dict[str, Any] = {}
    client_app = _legacy_client_app(template, list(sent), data, lr, threat.bn_mode == "train", seed)
    server_app = _secaggplus_server_app(sent, len(data), settings, record)
    seconds = simulate(server_app, client_app, len(data), runtime)
    if "aggregate" not in record:
        raise RuntimeError("the SecAgg+ round ended without an aggregate"
                           + (f" ({record['failures']} failures)" if record.get("failures") else ""))
    aggregate = {name: torch.from_numpy(array) for name, array in zip(sent, record["aggregate"], strict=True)}
    return SecAggPlusRound(sent=sent, aggregate=aggregate, num_examples=tuple(record["num_examples"]),
                           settings=settings, version=str(flwr.__version__), seconds=seconds)


def flower_secaggplus_update(model: ImageVictim, batches: Sequence[Batch], threat: ThreatModel = ThreatModel(), *,
                             lr: float = 1.0, settings: SecAggPlusSettings | None = None,
                             seed: int = 0, runtime: str = "ray") -> ClientUpdate:
    """The update a Flower server learns under SecAgg+ from K = len(batches) clients (`secaggplus_round`):
    the aggregate of their new weights turned back into a gradient, (θ₀ − θ̄) / η, cast to the model's
    dtype; with equal batches the mean of their FedSGD gradients up to Flower's quantisation, as leakbench's
    `secagg` shares it. `settings` None: Flower's defaults but `max_weight` = the largest batch (the finest
    quantisation). `kind` is "flower-secaggplus"; `model` is not modified."""
    settings = settings or SecAggPlusSettings(max_weight=float(max(batch.size for batch in batches)))
    result = secaggplus_round(model, [(batch.images, batch.labels) for batch in batches], lr=lr,
                              settings=settings, seed=seed, threat=threat, runtime=runtime)
    params = dict(model.named_parameters())
    gradients = {name: g.to(params[name].dtype)
                 for name, g in as_gradients(result.sent, result.aggregate, list(params), lr).items()}
    buffers = ({name: t.to(result.sent[name].dtype) for name, t in result.aggregate.items() if name not in params}
               if threat.bn_stats_shared else None)
    return ClientUpdate(
        model=copy.deepcopy(model).requires_grad_(False).eval(),
        gradients=gradients,
        threat=threat,
        batch_size=sum(result.num_examples) if threat.batch_size_known else None,
        labels=torch.cat([batch.labels for batch in batches]) if threat.labels_known else None,
        kind="flower-secaggplus",
        buffers=buffers,
    )


def as_gradients(sent: Arrays, new: Arrays, names: Sequence[str], lr: float) -> Arrays:
    """The gradient a one-step client's new weights imply: (θ₀ − θ₁) / η for each parameter in `names`."""
    return {name: ((sent[name] - new[name]) / lr).clone() for name in names}


def flower_fedsgd_update(model: ImageVictim, batch: Batch, threat: ThreatModel = ThreatModel(), *,
                         lr: float = 1.0, runtime: str = "ray", mods: Sequence[Any] = (),
                         config: Mapping[str, float] | None = None, seed: int = 0,
                         release: Callable[[FlowerRound], Arrays] | None = None,
                         kind: str = "flower-fedsgd", local: LocalTraining | None = None,
                         steps: int = 1) -> ClientUpdate:
    """The FedSGD update of `model` on `batch` as a Flower server receives it: one Flower round with one
    client (`fedsgd_round`, the client behind `mods`, sent `config`), its new weights turned back into the
    gradient (`as_gradients`). `release` None: the reply the server received; else the weights `release` makes
    of the round (`released`: what Flower's DP strategy publishes). `local`, `steps`: a client that trains
    otherwise (flower-fedavg: K = `steps` SGD steps of rate `lr`) shares (θ₀ − θ_K) / (η K), as leakbench's
    `fedavg` does. The update's model is the one the server sent; `kind` names the transform. `model` is not
    modified."""
    result = fedsgd_round(model, [(batch.images, batch.labels)], lr=lr, threat=threat, mods=mods, config=config,
                          seed=seed, runtime=runtime, local=local)
    names = [name for name, _ in model.named_parameters()]
    reply = result.received[0]
    arrays = reply.arrays if release is None else release(result)
    buffers = ({name: t.clone() for name, t in arrays.items() if name not in names}
               if threat.bn_stats_shared else None)
    return ClientUpdate(
        model=copy.deepcopy(model).requires_grad_(False).eval(),
        gradients=as_gradients(result.sent, arrays, names, lr * steps),
        threat=threat,
        batch_size=reply.num_examples if threat.batch_size_known else None,
        labels=batch.labels.clone() if threat.labels_known else None,
        kind=kind,
        buffers=buffers,
    )


def released(result: FlowerRound, noise_multiplier: float, clipping_norm: float, seed: int) -> Arrays:
    """What Flower's `DifferentialPrivacyClientSideFixedClipping` (around Flower's FedAvg) makes of the round's
    replies and publishes: their example-weighted mean plus Gaussian noise of standard deviation
    noise_multiplier · clipping_norm / K, drawn from NumPy's global generator, seeded here with `seed`."""
    import numpy as np

    strategy = importlib.import_module("flwr.serverapp.strategy")
    dp = strategy.DifferentialPrivacyClientSideFixedClipping(strategy.FedAvg(), noise_multiplier, clipping_norm,
                                                             len(result.received))
    np.random.seed(seed)
    with _quiet():
        arrays, _ = dp.aggregate_train(1, [reply.message for reply in result.received])
    return {name: t.to(result.sent[name].dtype) for name, t in arrays.to_torch_state_dict().items()}


def installed() -> None:
    """Refuse (the one MISSING line) a Flower level where flwr is not installed, without importing it: a suite
    that names one is refused when it is read, before any cell runs."""
    if importlib.util.find_spec("flwr") is None:
        raise ConfigError(MISSING)


@dataclass(frozen=True)
class FlowerConfig(Ranged):
    """What every Flower level's settings check: their ranges and choices, and that flwr is installed."""

    def __post_init__(self) -> None:
        super().__post_init__()
        installed()


@dataclass(frozen=True)
class FlowerFedSGDConfig(FlowerConfig):
    """A Flower client's FedSGD step.

    lr: the client's learning rate η; the attack's gradient is (θ₀ − θ₁)/η (a larger η rounds it less).
    runtime: where Flower's Simulation Runtime runs the client: 'inprocess' (about 1 s) or 'ray' (about 10 s).
    """

    lr: float = ranged(1.0, 0, MAX_LR, low_open=True)
    runtime: str = chosen("inprocess", *RUNTIMES)
    owner: ClassVar[str] = "flower-fedsgd"


@dataclass(frozen=True)
class FlowerSecAggPlusConfig(FlowerConfig):
    """K Flower clients under SecAgg+ (`secaggplus_mod`, `SecAggPlusWorkflow`).

    clients: K, the number of clients whose new weights the server learns only as their weighted mean.
    lr: the clients' learning rate η.
    max_weight: SecAggPlusWorkflow's max_weight; 0 means b, the finest quantisation (Flower's default is 1000).
    runtime: 'inprocess' or 'ray', as for flower-fedsgd.
    """

    clients: int = ranged(2, 2, MAX_CLIENTS)
    lr: float = ranged(1.0, 0, MAX_LR, low_open=True)
    max_weight: float = ranged(0.0, 0, 1e9)
    runtime: str = chosen("inprocess", *RUNTIMES)
    owner: ClassVar[str] = "flower-secaggplus"


FLOWER = Citation("Beutel et al., Flower, 2020", "https://arxiv.org/abs/2007.14390")
"""The framework's paper: the Flower levels' link on the leaderboard (the DP and SecAgg+ levels cite their methods)."""


class FlowerLevel(UpdateTransform):
    """What every Flower level shares: it makes the update (a client transform), its label leaves out where its
    clients ran (`runtime`: not what the server receives; the record's columns keep it), and its records carry
    Flower's version."""

    makes_update = True
    paper = FLOWER

    def label(self) -> str:
        return " ".join(part for part in super().label().split() if not part.startswith("runtime="))

    def columns(self) -> dict[str, Any]:
        return {**super().columns(), "flower_version": str(flower().__version__)}


class FlowerFedSGD(FlowerLevel):
    """FedSGD through one real Flower round (flwr's Simulation Runtime): the server's received weights as a gradient."""

    name = "flower-fedsgd"
    Config = FlowerFedSGDConfig
    config: FlowerFedSGDConfig

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        return flower_fedsgd_update(client.model, client.batch, client.threat, lr=self.config.lr,
                                    runtime=self.config.runtime, seed=client.seed, kind=self.name,
                                    **self.round_options(client))

    def round_options(self, client: Client) -> dict[str, Any]:
        """What this level adds to the Flower round (`flower_fedsgd_update`'s mods, config, release): nothing."""
        return {}


class FlowerSecAggPlus(FlowerLevel):
    """Flower's SecAgg+ over K clients' FedSGD steps: the aggregate the server unmasked, as a gradient."""

    name = "flower-secaggplus"
    paper = Citation("Bell et al., CCS 2020 (SecAgg+)", "https://eprint.iacr.org/2020/704")
    Config = FlowerSecAggPlusConfig
    config: FlowerSecAggPlusConfig

    def clients(self) -> int:
        return self.config.clients

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        from leakbench.datasets.base import split_batch

        batches = split_batch(client.batch, self.config.clients)
        settings = SecAggPlusSettings(max_weight=self.config.max_weight or float(batches[0].size))
        return flower_secaggplus_update(client.model, batches, client.threat, lr=self.config.lr, settings=settings,
                                        seed=client.seed, runtime=self.config.runtime)


@dataclass(frozen=True)
class FlowerDPFixedConfig(FlowerConfig):
    """Flower's central DP with client-side fixed clipping: `fixedclipping_mod` on the client, Flower's
    `DifferentialPrivacyClientSideFixedClipping` strategy on the server (which sends the clipping norm).

    clipping_norm: C, the bound on the norm of the client's update θ₁ − θ₀ (weight units: η·‖g‖ for FedSGD).
    noise_multiplier: z; the server adds N(0, (z·C/K)²) to each aggregated weight.
    view: 'received' — the clipped reply the server receives (what an honest-but-curious server attacks: Flower
        adds the noise after it has it); 'released' — the noised aggregate the strategy publishes.
    lr, runtime: as flower-fedsgd's.
    """

    clipping_norm: float = ranged(1.0, 0, 1e9, low_open=True)
    noise_multiplier: float = ranged(1.0, 0, 1e6)
    view: str = chosen("received", "received", "released")
    lr: float = ranged(1.0, 0, MAX_LR, low_open=True)
    runtime: str = chosen("inprocess", *RUNTIMES)
    owner: ClassVar[str] = "flower-dp-fixed"


class FlowerDPFixed(FlowerFedSGD):
    """Flower's central DP, client-side fixed clipping: the clipped reply the server receives, or the noised release."""

    name = "flower-dp-fixed"
    paper = Citation("McMahan et al., ICLR 2018 (DP-FedAvg)", "https://arxiv.org/abs/1710.06963")
    Config = FlowerDPFixedConfig  # type: ignore[assignment]
    config: FlowerDPFixedConfig  # type: ignore[assignment]

    def round_options(self, client: Client) -> dict[str, Any]:
        mod = importlib.import_module("flwr.clientapp.mod").fixedclipping_mod
        cfg = self.config
        options: dict[str, Any] = {"mods": [mod], "config": {"clipping_norm": cfg.clipping_norm}}
        if cfg.view == "released":
            options["release"] = lambda result: released(result, cfg.noise_multiplier, cfg.clipping_norm, client.seed)
        return options


@dataclass(frozen=True)
class FlowerLocalDPConfig(FlowerConfig):
    """Flower's `LocalDpMod`: the client clips its update θ₁ − θ₀ to `clipping_norm` and adds Gaussian noise of
    σ = sensitivity · √(2 ln(1.25/δ)) / ε to every weight before it replies.

    lr, runtime: as flower-fedsgd's.
    """

    clipping_norm: float = ranged(1.0, 0, 1e9, low_open=True)
    sensitivity: float = ranged(1.0, 0, 1e9, low_open=True)
    epsilon: float = ranged(10.0, 0, 1e9, low_open=True)
    delta: float = ranged(1e-5, 0, 1, low_open=True, high_open=True)
    lr: float = ranged(1.0, 0, MAX_LR, low_open=True)
    runtime: str = chosen("inprocess", *RUNTIMES)
    owner: ClassVar[str] = "flower-localdp"


class FlowerLocalDP(FlowerFedSGD):
    """Flower's LocalDpMod: the client clips its update and adds Gaussian noise before it replies."""

    name = "flower-localdp"
    Config = FlowerLocalDPConfig  # type: ignore[assignment]
    config: FlowerLocalDPConfig  # type: ignore[assignment]

    def round_options(self, client: Client) -> dict[str, Any]:
        cfg = self.config
        mod = importlib.import_module("flwr.clientapp.mod").LocalDpMod(
            clipping_norm=cfg.clipping_norm, sensitivity=cfg.sensitivity, epsilon=cfg.epsilon, delta=cfg.delta)
        return {"mods": [mod]}


@dataclass(frozen=True)
class FlowerFedAvgConfig(FlowerConfig):
    """A Flower client training as leakbench's `fedavg` client does (`fl.fedavg.local_training`: E epochs of
    mini-batch SGD, shuffled from the cell's seed) and replying with its new weights θ_K.

    epochs, minibatch (0: the whole batch), lr: as fedavg's. runtime: as flower-fedsgd's.
    """

    epochs: int = ranged(1, 1, MAX_LOCAL_EPOCHS)
    minibatch: int = ranged(0, 0, MAX_WIDTH)
    lr: float = ranged(0.1, 0, MAX_LR, low_open=True)
    runtime: str = chosen("inprocess", *RUNTIMES)
    owner: ClassVar[str] = "flower-fedavg"


class FlowerFedAvg(FlowerFedSGD):
    """FedAvg through one real Flower round: E local epochs on the client; (θ₀ − θ_K)/(η K) of what the server got."""

    name = "flower-fedavg"
    Config = FlowerFedAvgConfig  # type: ignore[assignment]
    config: FlowerFedAvgConfig  # type: ignore[assignment]

    def round_options(self, client: Client) -> dict[str, Any]:
        cfg = self.config
        local_cfg = FedAvgConfig(epochs=cfg.epochs, minibatch=cfg.minibatch, lr=cfg.lr)

        def local(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> None:
            batch = dataclasses.replace(client.batch, images=images, labels=labels)
            local_training(model, batch, local_cfg, seed=client.seed)

        return {"local": local, "steps": local_cfg.steps(client.batch.size)}


for _transform in (FlowerFedSGD, FlowerSecAggPlus, FlowerDPFixed, FlowerLocalDP, FlowerFedAvg):
    register_transform(_transform)


def _client_step(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, lr: float) -> None:
    """One full-batch SGD step of `model` in place on leakbench's training loss."""
    from leakbench.models.base import training_loss

    params = list(model.parameters())
    dtype = params[0].dtype
    loss = training_loss(model, model(images.to(dtype)), labels)
    grads = torch.autograd.grad(loss, params)
    with torch.no_grad():
        for p, g in zip(params, grads, strict=True):
            p.sub_(lr * g)


def _client_app(template: nn.Module, data: list[tuple[torch.Tensor, torch.Tensor]], local: LocalTraining,
                bn_train: bool, mods: Sequence[Any], seed: int) -> Any:
    """A Flower ClientApp (behind `mods`) whose `train` loads the weights it is sent into a copy of
    `template`, trains it on its partition's batch (`local`), seeds NumPy's generator (seed + partition:
    the mods draw their noise from it) and replies with its new weights and its example count."""
    app_module = importlib.import_module("flwr.app")
    client_app = importlib.import_module("flwr.clientapp").ClientApp(mods=list(mods))

    def train(msg: Any, context: Any) -> Any:
        import numpy as np

        partition = int(context.node_config["partition-id"])
        images, labels = data[partition]
        model = copy.deepcopy(template).train(bn_train)
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        local(model, images, labels)
        np.random.seed(seed + partition)
        content = app_module.RecordDict({
            "arrays": app_module.ArrayRecord({k: v.detach() for k, v in model.state_dict().items()}),
            "metrics": app_module.MetricRecord({"num-examples": int(labels.shape[0]), "partition-id": partition})})
        return app_module.Message(content, reply_to=msg)

    client_app.train()(train)
    return client_app


def _server_app(sent: Arrays, clients: int, replies: list[Received], errors: list[str],
                config: Mapping[str, float] | None) -> Any:
    """A Flower ServerApp that waits for `clients` SuperNodes, sends each a TRAIN message with `sent` (and
    `config` as a ConfigRecord, if any), and appends every reply's arrays to `replies` (an error reply's
    text to `errors`)."""
    app_module = importlib.import_module("flwr.app")
    server_app = importlib.import_module("flwr.serverapp").ServerApp()

    def main(grid: Any, context: Any) -> None:
        nodes = _wait_for_nodes(grid, clients)
        records: dict[str, Any] = {"arrays": app_module.ArrayRecord(sent)}
        if config is not None:
            records["config"] = app_module.ConfigRecord(dict(config))
        messages = [app_module.Message(app_module.RecordDict(records), dst_node_id=node,
                                       message_type=app_module.MessageType.TRAIN)
                    for node in nodes]
        for reply in grid.send_and_receive(messages):
            if reply.has_error():
                errors.append(str(reply.error.reason))
                continue
            metrics = reply.content["metrics"]
            replies.append(Received(client=int(metrics["partition-id"]),
                                    arrays=dict(reply.content["arrays"].to_torch_state_dict()),
                                    num_examples=int(metrics["num-examples"]), message=reply))

    server_app.main()(main)
    return server_app


def _legacy_client_app(template: nn.Module, names: list[str], data: list[tuple[torch.Tensor, torch.Tensor]],
                       lr: float, bn_train: bool, seed: int) -> Any:
    """A Flower ClientApp of the NumPyClient kind behind `secaggplus_mod` (the mod reads a legacy FitRes):
    `fit` loads the weights it is sent (in the order of `names`) into a copy of `template`, takes one SGD
    step on its partition's batch, seeds NumPy's generator (the mod's stochastic rounding) and replies
    with its new weights and example count."""
    numpy_client = importlib.import_module("flwr.client").NumPyClient
    mod = importlib.import_module("flwr.client.mod").secaggplus_mod

    class StepClient(numpy_client):  # type: ignore[misc,valid-type]  # flwr is typed where installed, Any where not
        def __init__(self, partition: int) -> None:
            self.partition = partition

        def fit(self, parameters: list[Any], config: dict[str, Any]) -> tuple[list[Any], int, dict[str, Any]]:
            import numpy as np

            images, labels = data[self.partition]
            model = copy.deepcopy(template).train(bn_train)
            model.load_state_dict({n: torch.from_numpy(np.array(a)) for n, a in zip(names, parameters, strict=True)})
            _client_step(model, images, labels, lr)
            np.random.seed(seed + self.partition)
            state = model.state_dict()
            return [state[n].detach().numpy() for n in names], int(labels.shape[0]), {}

    def client_fn(context: Any) -> Any:
        return StepClient(int(context.node_config["partition-id"])).to_client()

    return importlib.import_module("flwr.clientapp").ClientApp(client_fn=client_fn, mods=[mod])


def _secaggplus_server_app(sent: Arrays, clients: int, settings: SecAggPlusSettings, record: dict[str, Any]) -> Any:
    """A Flower ServerApp running one round of Flower's FedAvg under `SecAggPlusWorkflow` from the weights
    `sent`; its strategy writes the aggregate it receives (and each reply's example count) into `record`."""
    server = importlib.import_module("flwr.server")
    common = importlib.import_module("flwr.common")
    workflow = importlib.import_module("flwr.server.workflow")

    class RecordingFedAvg(server.strategy.FedAvg):  # type: ignore[misc,name-defined]
        def aggregate_fit(self, server_round: int, results: list[Any], failures: list[Any]) -> Any:
            record["failures"] = len(failures)
            if results:  # under SecAgg+ every result carries the one unmasked aggregate
                record["aggregate"] = common.parameters_to_ndarrays(results[0][1].parameters)
                record["num_examples"] = [fit.num_examples for _, fit in results]
            return super().aggregate_fit(server_round, results, failures)

    strategy = RecordingFedAvg(
        fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=clients, min_available_clients=clients,
        initial_parameters=common.ndarrays_to_parameters([t.numpy() for t in sent.values()]))
    server_app = server.ServerApp()

    def main(grid: Any, context: Any) -> None:
        _wait_for_nodes(grid, clients)
        legacy = server.LegacyContext(context=context, config=server.ServerConfig(num_rounds=1), strategy=strategy)
        secagg = workflow.SecAggPlusWorkflow(
            num_shares=settings.num_shares, reconstruction_threshold=settings.reconstruction_threshold,
            max_weight=settings.max_weight, clipping_range=settings.clipping_range,
            quantization_range=settings.quantization_range, modulus_range=settings.modulus_range)
        workflow.DefaultWorkflow(fit_workflow=secagg)(grid, legacy)

    server_app.main()(main)
    return server_app


def simulate(server_app: Any, client_app: Any, clients: int, runtime: str) -> float:
    """Run `server_app` against `clients` simulated SuperNodes of `client_app` (Flower's Simulation
    Runtime on `runtime`, one CPU, Flower's log held to errors); the wall time in seconds. Ray's session
    folder (logs, sockets: about 200 KB a round) goes in a temporary folder removed afterwards, not /tmp/ray.
    Public: a user's own ServerApp and ClientApp run through it too (the Flower example's test does)."""
    start = time.perf_counter()
    with _quiet(), tempfile.TemporaryDirectory(prefix="lb-ray-", ignore_cleanup_errors=True) as ray_dir:
        ray_backend = importlib.import_module("flwr.server.superlink.fleet.vce.backend.raybackend")
        shipped = ray_backend.RayBackend
        if runtime == "inprocess":  # Flower's start_vce builds `raybackend.RayBackend` by name, at call time
            vars(ray_backend)["RayBackend"] = _in_process_backend()
        try:
            importlib.import_module("flwr.simulation").run_simulation(
                server_app=server_app, client_app=client_app, num_supernodes=clients,
                backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                "init_args": {"num_cpus": 1, "include_dashboard": False, "log_to_driver": False,
                                              "logging_level": logging.ERROR, "_temp_dir": ray_dir}})
        finally:
            vars(ray_backend)["RayBackend"] = shipped
    return time.perf_counter() - start


def _in_process_backend() -> type:
    """A Flower Simulation Runtime backend (`flwr...vce.backend.Backend`) with one worker that runs the
    ClientApp in this process, in the runtime's worker thread: what Ray's actor pool does, without Ray.
    Each message, and each reply, goes through Flower's wire format (protobuf, `flwr.common.serde`) as it
    would between processes: a ClientApp or mod that changes the message it was handed (`secaggplus_mod`
    pops its stage from the ConfigRecord every client shares) changes its own copy only. A ClientApp's
    exception is reported as Flower's own backend reports it (`ClientAppException`)."""
    base = importlib.import_module("flwr.server.superlink.fleet.vce.backend").Backend
    app_exception = importlib.import_module("flwr.simulation.ray_transport.ray_actor").ClientAppException
    serde = importlib.import_module("flwr.common.serde")

    def wire(message: Any) -> Any:
        return serde.message_from_proto(serde.message_to_proto(message))

    class InProcessBackend(base):  # type: ignore[misc,valid-type]  # flwr is typed where installed, Any where not
        def __init__(self, backend_config: Any) -> None:
            self.app_fn: Any = None

        def build(self, app_fn: Any) -> None:
            self.app_fn = app_fn

        @property
        def num_workers(self) -> int:
            return 1

        def is_worker_idle(self) -> bool:
            return True

        def terminate(self) -> None:
            pass

        def process_message(self, message: Any, context: Any) -> tuple[Any, Any]:
            try:
                return wire(self.app_fn()(message=wire(message), context=context)), context
            except Exception as exc:
                raise app_exception(str(exc)) from exc

    return InProcessBackend


def _wait_for_nodes(grid: Any, count: int, wait_s: float = NODE_WAIT_S) -> list[int]:
    """The ids of `count` registered SuperNodes, polled until they are all there (RuntimeError after `wait_s`)."""
    deadline = time.monotonic() + wait_s
    nodes = list(grid.get_node_ids())
    while len(nodes) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(nodes)} of {count} Flower SuperNodes registered in {wait_s:g} s")
        time.sleep(0.02)
        nodes = list(grid.get_node_ids())
    return [int(n) for n in nodes[:count]]


def _check_runtime(runtime: str) -> None:
    """One ConfigError line for an unknown runtime, when ray is missing (Flower's Simulation Runtime imports
    it either way), or for the Ray runtime in a process already connected to Ray (Flower would shut it down)."""
    if runtime not in RUNTIMES:
        raise ConfigError(f"the Flower runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
    try:
        ray = importlib.import_module("ray")
    except ImportError:
        raise ConfigError("Flower's Simulation Runtime needs ray: pip install 'leakbench[flower]'") from None
    if runtime == "ray" and ray.is_initialized():
        raise ConfigError("a Flower round cannot run in a process already connected to Ray (Flower shuts Ray "
                          "down when its round ends): run Flower cells without --executor ray")


_ROUND_LOCK = threading.Lock()
"""One Flower round at a time in a process: Flower's log level and (in process) its backend are swapped."""


@contextmanager
def _quiet() -> Iterator[None]:
    """Flower's own log (its INFO lines, its deprecation warning for `run_simulation`) held to errors."""
    with _ROUND_LOCK:
        log = logging.getLogger("flwr")
        level = log.level
        log.setLevel(logging.ERROR)
        try:
            yield
        finally:
            log.setLevel(level)


__all__ = ["MISSING", "RUNTIMES", "FlowerDPFixed", "FlowerDPFixedConfig", "FlowerFedAvg", "FlowerFedAvgConfig",
           "FlowerFedSGD", "FlowerFedSGDConfig",
           "FlowerLocalDP", "FlowerLocalDPConfig", "FlowerRound", "FlowerSecAggPlus",
           "FlowerSecAggPlusConfig", "Received", "SecAggPlusRound", "SecAggPlusSettings", "as_gradients",
           "fedsgd_round", "flower", "flower_fedsgd_update", "flower_secaggplus_update", "released",
           "secaggplus_round", "simulate"]
