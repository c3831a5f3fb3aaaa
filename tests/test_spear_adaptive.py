"""SPEAR's adaptive forms (issue 43): `spear-approx` answers with a whole, unverified batch under noise;
`spear-masked` completes the entries a known pruning defence zeroed. Bounds, not exact counts of seeded searches."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from leakbench.attacks import attack_class, create_attack
from leakbench.attacks.spear.adaptive import complete_in_span, complete_low_rank, inpaint
from leakbench.attacks.spear.state import SearchState
from leakbench.core.reconstruction import Reconstruction
from leakbench.datasets import Batch, load_dataset, sample_batch
from leakbench.fl import ClientUpdate, ThreatModel, fedsgd_update
from leakbench.fl.noise import add_noise
from leakbench.fl.prune import prune
from leakbench.models import build_fc

B, WIDTH = 4, 100


def _cell(seed: int, threat: ThreatModel | None = None) -> tuple[Batch, ClientUpdate]:
    """b = 4 embedded images on an FC-3 of width 100 at init, and the clean FedSGD update."""
    ds = load_dataset("embedded")
    batch = sample_batch(ds, B, seed=seed)
    model = build_fc(ds.image_shape, ds.num_classes, width=WIDTH, depth=3, seed=seed)
    return batch, fedsgd_update(model, batch, threat or ThreatModel())


def _psnr(result: Reconstruction, batch: Batch) -> torch.Tensor:
    """Per true image, the PSNR (dB) of the reconstructed image nearest to it (no images: −inf each)."""
    if result.images is None:
        return torch.full((batch.images.shape[0],), -torch.inf)
    mse = ((result.images[None] - batch.images[:, None]) ** 2).flatten(2).mean(2)  # (true, recovered)
    return (10 * torch.log10(1 / mse.clamp_min(1e-20))).amax(1)


def test_approx_answers_whole_unverified_batch_under_noise() -> None:
    """σ = 1e-4 on the gradient (the largest entry of layer 1 is ~0.02): spear-paper reports failure, spear-approx
    returns all b images, status ok, marked unverified, and they are close to the batch."""
    batch, clean = _cell(seed=1)
    update = add_noise(clean, 1e-4, 1)
    paper = create_attack("spear-paper", max_draws=200_000).reconstruct(update, seed=1)
    approx = create_attack("spear-approx", max_draws=200_000).reconstruct(update, seed=1)
    assert paper.status == "failed"
    assert approx.status == "ok" and approx.images is not None and approx.images.shape[0] == B
    assert approx.stats["verified"] is False and approx.stats["relu_violations"] > 0
    assert float(_psnr(approx, batch).median()) > 40


def test_paper_return_unverified_flag() -> None:
    """spear-paper's default reports a failed verification; `return_unverified` answers with that batch instead,
    whole and marked unverified (never a partial answer, which holds verified samples only)."""
    _, clean = _cell(seed=1)
    update = add_noise(clean, 1e-4, 1)
    result = create_attack("spear-paper", max_draws=200_000, return_unverified=True).reconstruct(update, seed=1)
    assert result.status == "ok" and result.images is not None and result.images.shape[0] == B
    assert result.stats["verified"] is False and "verification failed" in result.stats["unverified_reason"]


def _machine(monkeypatch: pytest.MonkeyPatch, draws_per_second: float) -> None:
    """Simulate a machine that does `draws_per_second` of the search's work per second (its speed under load): the
    search's clock reads its draws so far at that rate, so the time cap is hit at a known point of the work."""
    monkeypatch.setattr(SearchState, "seconds", property(lambda state: state.draws / draws_per_second))


def _approx_on_noise(**params: float) -> Reconstruction:
    """spear-approx on the noisy cell of the tests above (σ = 1e-4, seed 1), in small chunks (several per run)."""
    _, clean = _cell(seed=1)
    return create_attack("spear-approx", max_draws=200_000, chunk=256, **params).reconstruct(
        add_noise(clean, 1e-4, 1), seed=1)


def test_approx_stops_by_work_not_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same seed gives the same answer (same draws, same images) on a fast and on a slow machine; where the slow
    machine hits the time cap first it gives no answer (a budget failure), never an earlier batch."""
    _machine(monkeypatch, 1e12)
    reference = _approx_on_noise(max_seconds=10)
    assert reference.status == "ok" and reference.images is not None
    capped = 0
    for speed in (1e6, 1e3, 100.0, 30.0, 10.0):
        _machine(monkeypatch, speed)
        result = _approx_on_noise(max_seconds=10)
        if result.status == "failed":
            assert result.failure == "budget"
            capped += 1
            continue
        assert result.stats["draws"] == reference.stats["draws"]
        assert result.images is not None and torch.equal(result.images, reference.images)
    assert capped  # the slowest machines hit the cap before the search's own stop


def test_approx_time_cap_is_a_budget_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hitting the safety cap (max_seconds) before the search stops by its work: failed, kind "budget", no images."""
    _machine(monkeypatch, 1.0)
    result = _approx_on_noise(max_seconds=1)
    assert result.status == "failed" and result.failure == "budget" and result.images is None
    assert "max_seconds" in result.reason


def test_approx_without_noise_is_exact_and_verified() -> None:
    batch, update = _cell(seed=0)
    result = create_attack("spear-approx", max_draws=200_000).reconstruct(update, seed=0)
    assert result.status == "ok" and result.stats["verified"] is True
    assert float(_psnr(result, batch).min()) > 60


def _pruned(update: ClientUpdate, fraction: float) -> ClientUpdate:
    return update.with_gradients({k: prune(g, fraction) for k, g in update.gradients.items()}, "prune")


@pytest.mark.parametrize("fraction", [0.45, 0.6])
def test_masked_recovers_more_than_plain_under_prune(fraction: float) -> None:
    """Prune p of every tensor, defence known: spear-masked recovers every image (≥ 40 dB), plain spear-paper fewer
    (it fails verification on the zeros: none). The clean layer-1 gradient of this cell is already 33 % exact zeros
    (dead neurons), so p must be well above that to zero any live entry."""
    batch, clean = _cell(seed=0, threat=ThreatModel(defence_known=True))
    update = _pruned(clean, fraction)
    update = dataclasses.replace(update, defences=({"name": "prune", "fraction": fraction},))
    masked = create_attack("spear-masked", max_draws=200_000).reconstruct(update, seed=0)
    plain = create_attack("spear-paper", max_draws=200_000).reconstruct(update, seed=0)
    assert masked.stats["completed_entries"] > 0
    recovered = int((_psnr(masked, batch) > 40).sum())
    assert recovered == B
    assert int((_psnr(plain, batch) > 40).sum()) < recovered


def test_masked_completes_nothing_when_the_defence_is_unknown() -> None:
    """Under the default threat model the update lists no defence: nothing is masked (module doc of
    attacks.adaptive), so the exact zeros stay zeros."""
    _, clean = _cell(seed=0)
    result = create_attack("spear-masked", max_draws=20_000).reconstruct(_pruned(clean, 0.1), seed=0)
    assert result.stats["completed_entries"] == 0


def test_low_rank_completion_is_exact_on_a_low_rank_matrix() -> None:
    gen = torch.Generator().manual_seed(0)
    G = torch.randn(60, 3, generator=gen, dtype=torch.float64) @ torch.randn(3, 200, generator=gen,
                                                                           dtype=torch.float64)
    observed = torch.rand(G.shape, generator=gen) > 0.3
    filled = complete_low_rank(torch.where(observed, G, 0.0), observed, 3)
    assert float((filled - G).norm() / G.norm()) < 1e-8
    g = G @ torch.randn(200, generator=gen, dtype=torch.float64)  # in G's column space, as dL/db is
    seen = torch.rand(60, generator=gen) > 0.3
    assert float((complete_in_span(G, torch.where(seen, g, 0.0), seen, 3) - g).norm() / g.norm()) < 1e-8


def test_inpaint_fills_unseen_pixels_of_a_smooth_image() -> None:
    """A linear ramp is harmonic: the pixels Soteria's columns hide are filled back to it; seen pixels stay."""
    ramp = torch.linspace(-1, 1, 8, dtype=torch.float64)
    X = (ramp[None, :, None] + ramp[None, None, :]).expand(3, 8, 8).reshape(1, -1).clone()
    unseen = torch.zeros(X.shape[1], dtype=torch.bool)
    unseen[torch.tensor([9, 20, 45, 100, 150])] = True
    filled = inpaint(torch.where(unseen, 0.0, X), unseen, (3, 8, 8), rounds=2000)
    assert float((filled - X).abs().max()) < 1e-6


def test_adaptive_forms_say_what_they_adapt_to() -> None:
    assert attack_class("spear-approx").adapts_to == {"noise", "dp", "uniform-quantise", "quantise", "qsgd"}
    assert attack_class("spear-masked").adapts_to == {"prune", "soteria", "soteria-first"}
    for name in ("spear-approx", "spear-masked"):
        assert "leakbench's adaptive form, not published" in attack_class(name).description
    assert attack_class("spear-paper").adapts_to == frozenset()


def test_spear_adaptive_forms_adapt_to_the_shipped_names() -> None:
    """What they adapt to are registered defences (the renamed quantisation and the Soteria variant too), and
    spear-masked covers every zeroing defence ig-masked covers."""
    from leakbench.attacks import attack_class
    from leakbench.attacks.adaptive import ZEROING
    from leakbench.fl.transform import TRANSFORMS

    approx, masked = attack_class("spear-approx").adapts_to, attack_class("spear-masked").adapts_to
    assert {"noise", "dp", "uniform-quantise", "qsgd"} <= approx and set(ZEROING) == masked
    assert (approx | masked) - {"quantise"} <= set(TRANSFORMS.names())
