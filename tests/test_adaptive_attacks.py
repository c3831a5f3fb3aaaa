"""Issue 43's adaptive gradient-matching attacks: the PRECODE-aware variants (`ig-precode`, `dlg-precode`)
and SPEAR's un-mixing of the in-batch MixUp (`spear-unmix`, `unmix`)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from leakbench.attacks import create_attack
from leakbench.attacks.adaptive import dropped_masks, in_batch_mixup, keep_pure, unmix
from leakbench.attacks.gradient_matching import GradientOracle, cosine_distance, l2_distance
from leakbench.datasets import Batch
from leakbench.fl.mixup import MixUpBatch, MixUpBatchConfig, mixing
from leakbench.fl.precode import Precode, PrecodeConfig
from leakbench.fl.transform import Client, FedSGD, client_update
from leakbench.fl.update import ClientUpdate, ThreatModel
from leakbench.metrics.image import psnr
from leakbench.metrics.matching import apply_matching, match_by_mse
from leakbench.models import build_model


def _batch(b: int, seed: int = 0) -> Batch:
    images = torch.rand(b, 3, 8, 8, generator=torch.Generator().manual_seed(seed))
    return Batch(images=images, labels=torch.arange(b) % 10, indices=tuple(range(b)), dataset="random",
                 num_classes=10)


def _precode_update(known: bool, b: int = 2) -> ClientUpdate:
    """A FedSGD update of an FC-3 w32 victim with PRECODE's bottleneck (K = 8) on random 8×8 images."""
    precode = Precode(PrecodeConfig(bottleneck=8))
    model = precode.victim(build_model("fc", (3, 8, 8), 10, width=32, depth=3, seed=0), 0)
    client = Client(model, _batch(b), 0, ThreatModel(defence_known=known))
    return client_update([FedSGD(FedSGD.Config()), precode], client)


def _bottleneck_names(update: ClientUpdate) -> set[str]:
    """The bottleneck's and the classifier's parameters: layers d, d + 1, d + 2 of the PRECODE victim."""
    model = update.model
    d = model.base_depth  # type: ignore[attr-defined]
    return {name for layer in (d, d + 1, d + 2) for name in model.layer_param_names(layer)}


def _distance(update: ClientUpdate, masks: dict[str, torch.Tensor] | None, distance: object) -> float:
    """The gradient distance of a fixed dummy batch (a fresh oracle: the same bottleneck noise every call)."""
    oracle = GradientOracle(update, masks)
    z = torch.randn((int(update.batch_size or 0), *oracle.image_shape), generator=torch.Generator().manual_seed(1))
    return float(oracle.distance(z, torch.tensor([3, 5]), distance).detach())  # type: ignore[arg-type]


@pytest.mark.parametrize("distance", [cosine_distance, l2_distance])
def test_the_precode_aware_loss_ignores_the_bottleneck_and_later_layers(distance: object) -> None:
    update = _precode_update(known=True)
    names = _bottleneck_names(update)
    assert set(dropped_masks(update)) == names  # encoder, decoder and classifier, weights and biases
    gen = torch.Generator().manual_seed(2)
    changed = dataclasses.replace(update, gradients={
        n: g + 10 * torch.randn(g.shape, generator=gen) if n in names else g for n, g in update.gradients.items()})
    before, after = _distance(update, dropped_masks(update), distance), _distance(changed, dropped_masks(changed),
                                                                                 distance)
    assert after == pytest.approx(before, rel=1e-9, abs=1e-12)
    assert _distance(changed, None, distance) != pytest.approx(_distance(update, None, distance), rel=1e-3)  # plain
    first = update.model.layer_param_names(1)[0]  # a layer before the bottleneck still counts
    moved = dataclasses.replace(update, gradients={**update.gradients, first: update.gradients[first] + 1.0})
    assert _distance(moved, dropped_masks(moved), distance) != pytest.approx(before, rel=1e-3)


@pytest.mark.parametrize("name", ["ig-precode", "dlg-precode"])
def test_with_the_defence_unknown_the_precode_variants_are_their_plain_forms(name: str) -> None:
    update = _precode_update(known=False)
    assert dropped_masks(update) == {}
    budget = {"iterations": 5}
    adaptive = create_attack(name, **budget).reconstruct(update, seed=3)
    plain = create_attack(name.removesuffix("-precode"), **budget).reconstruct(update, seed=3)
    assert adaptive.images is not None and plain.images is not None
    assert torch.equal(adaptive.images, plain.images)
    known = create_attack(name, **budget).reconstruct(_precode_update(known=True), seed=3)
    assert known.images is not None and not torch.equal(known.images, plain.images)  # known: it does adapt


def _rectangles(b: int, seed: int, side: int = 32, count: int = 4) -> torch.Tensor:
    """b images of `count` random coloured rectangles on grey: each image's edges lie at places of its own,
    so the images' neighbour differences are sparse and nearly independent (as natural images' are)."""
    gen = torch.Generator().manual_seed(seed)
    images = torch.full((b, 3, side, side), 0.5, dtype=torch.float64)
    for image in images:
        for _ in range(count):
            x0, y0 = torch.randint(0, side - 4, (2,), generator=gen).tolist()
            w, h = torch.randint(3, side // 2, (2,), generator=gen).tolist()
            image[:, y0:y0 + h, x0:x0 + w] += 0.8 * (torch.rand(3, 1, 1, generator=gen, dtype=torch.float64) - 0.5)
    return images.clamp(0, 1)


@pytest.mark.parametrize("seed", range(4))
def test_unmix_inverts_an_in_batch_mixup_mixture(seed: int) -> None:
    """MixUp's own (λ, π) at α = 1 mix 8 images two by two; un-mixing finds every image above 30 dB PSNR
    (measured 34–42 dB on seeds 0–11), at least 5 dB above the mixtures on average (measured 9–20 dB)."""
    images = _rectangles(8, seed)
    lam, perm = mixing(8, 1.0, seed)
    shape = (-1, 1, 1, 1)
    mixtures = lam.reshape(shape) * images + (1 - lam.reshape(shape)) * images[perm]

    def scores(found: torch.Tensor) -> torch.Tensor:
        matched = apply_matching(found.float(), match_by_mse(found.float(), images.float()))
        return psnr(matched, images.float())

    unmixed, mixed = scores(unmix(mixtures)), scores(mixtures)
    moved = perm != torch.arange(8)  # a fixed point of π is shared unmixed
    assert float(unmixed.min()) > 30.0
    assert float(unmixed[moved].mean()) > float(mixed[moved].mean()) + 5.0


def test_spear_unmix_un_mixes_only_when_the_update_lists_the_in_batch_mixup() -> None:
    model = build_model("fc", (3, 8, 8), 10, width=32, depth=3, seed=0)
    mixup = MixUpBatch(MixUpBatchConfig(alpha=1.0))
    known = client_update([mixup], Client(model, _batch(4), 0, ThreatModel(defence_known=True)))
    unknown = client_update([mixup], Client(model, _batch(4), 0, ThreatModel()))
    assert in_batch_mixup(known) and not in_batch_mixup(unknown)
    plain = client_update([FedSGD(FedSGD.Config())], Client(model, _batch(4), 0, ThreatModel(defence_known=True)))
    assert not in_batch_mixup(plain)
    published = {"name": "mixup", "k": 4, "cap": 0.65, "sign_flip": False}  # Huang et al.'s k-image form
    assert not in_batch_mixup(dataclasses.replace(known, defences=(published,)))


def test_keep_pure_takes_a_mixture_that_holds_one_image_alone() -> None:
    gen = torch.Generator().manual_seed(0)
    truth = torch.rand(4, 50, generator=gen, dtype=torch.float64)
    mixing_matrix = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.3, 0.7, 0.0, 0.0], [0.0, 0.4, 0.0, 0.6],
                                  [0.5, 0.0, 0.0, 0.5]], dtype=torch.float64)  # row 0: image 2 unmixed
    mixtures = mixing_matrix @ truth
    estimate = truth + 1e-3 * torch.randn(truth.shape, generator=gen, dtype=torch.float64)
    kept = keep_pure(mixtures, estimate)
    assert torch.equal(kept[2], truth[2])  # exact: the mixture itself
    assert torch.equal(kept[[0, 1, 3]], estimate[[0, 1, 3]])  # the mixed ones: the estimate, untouched


def test_each_adaptive_variant_names_its_plain_form_and_what_it_adapts_to() -> None:
    from leakbench.attacks import attack_class
    from leakbench.attacks.adaptive import PLAIN

    for name, plain in PLAIN.items():
        cls = attack_class(name)
        assert cls.adapts_to and "not published" in cls.description
        assert issubclass(cls.Config, attack_class(plain).Config)  # the plain attack's knobs (ig-dequant adds `fit`)


# --------------------------------------------------------------------------- spear-demix (Huang et al.'s MixUp)


def _mixup_update(k: int, known: bool = True, b: int = 6) -> tuple[ClientUpdate, Batch, torch.Tensor]:
    """Huang et al.'s MixUp update (k images per mixture) of an FC-3 w64 victim on random 8×8 images, partners from
    the batch (no local data); with the mixtures the client computed and their soft labels (test side only)."""
    from leakbench.fl.mixup import MixUp, MixUpConfig, draw_mixing, local_pool, mixtures

    config = MixUpConfig(k=k)
    batch = _batch(b)
    model = build_model("fc", (3, 8, 8), 10, width=64, depth=3, seed=0)
    update = client_update([MixUp(config)], Client(model, batch, 0, ThreatModel(defence_known=known)))
    local, own = local_pool(batch)
    mixed, targets = mixtures(batch, draw_mixing(own, len(local), config, 0, (3, 8, 8)), local, 0.5, torch.float64)
    return update, mixed, targets


@pytest.mark.parametrize("k", [2, 4])
def test_soft_labels_are_read_from_the_classifier_gradient(k: int) -> None:
    """Given the mixtures, the classifier's gradient is linear in the soft labels: least squares gives the client's
    own soft labels (each mixture's coefficients summed per class)."""
    from leakbench.attacks.adaptive import soft_labels

    update, mixed, targets = _mixup_update(k)
    assert torch.allclose(soft_labels(update, mixed), targets, atol=1e-4)


def test_spear_demix_is_not_applicable_where_its_assumptions_fail() -> None:
    """Defence unknown, no k-image mixup listed (the in-batch form), InstaHide sign flips: failed as not
    applicable, before SPEAR runs."""
    unknown, _, _ = _mixup_update(4, known=False)
    known, _, _ = _mixup_update(4)
    in_batch = dataclasses.replace(known, defences=({"name": "mixup-batch", "alpha": 1.0},))
    flipped = dataclasses.replace(known, defences=({"name": "mixup", "k": 4, "cap": 0.65, "sign_flip": True},))
    attack = create_attack("spear-demix")
    for update in (unknown, in_batch, flipped):
        result = attack.reconstruct(update, seed=0)
        assert result.status == "failed" and result.failure == "not-applicable" and "does not apply" in result.reason


def test_spear_demix_reads_the_mixing_law_from_the_threat_and_beats_the_mixtures() -> None:
    """The attack sees only the update (no image): SPEAR's exact mixtures, then each scaled about the mean by the
    law's gain given its soft label. On random images (independent pixels, where the least-squares gain is the
    best linear estimate) its images are nearer the private ones than the mixtures are; the gains follow the k
    the update lists (the more partners, the larger the gain to undo their dilution)."""
    update, mixed, _ = _mixup_update(4)
    truth = _batch(6).images.to(torch.float64)
    result = create_attack("spear-demix").reconstruct(update, seed=0)
    assert result.status == "ok" and result.images is not None and result.stats["demixed"]
    found = result.images.to(torch.float64)
    found = apply_matching(found, match_by_mse(found.float(), truth.float()))  # SPEAR's rows in some order
    assert float(((found - truth) ** 2).mean()) < float(((mixed - truth) ** 2).mean())
    relisted = dataclasses.replace(update, defences=({"name": "mixup", "k": 6, "cap": 0.65, "sign_flip": False},))
    again = create_attack("spear-demix").reconstruct(relisted, seed=0)
    assert again.stats["gain_mean"] > result.stats["gain_mean"]
