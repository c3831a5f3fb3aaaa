"""Low-rank factorisation of a linear layer's weight gradient: G = L R, with dead rows dropped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from leakbench.attacks.spear.tolerances import TOLERANCES


@dataclass(frozen=True)
class LayerProblem:
    """Everything SPEAR works on, in float64 on one device.

    G = dL/dW (m×n), g = dL/dbias (m), W, bias: the attacked layer; `rows` are the indices of the
    neurons kept (not dead); L (m'×b), R (b×n) with G[rows] = L R and R orthonormal rows;
    Ln = L with unit rows (for zero tests); A = W[rows] Rᵀ (m'×b) maps c to pre-activations.
    `noise` is the relative size of the first discarded singular value, σ_{b+1}/σ_1, for the batch size b given;
    `b` (the factor's rank) counts only the samples visible above that noise (`visible_rank`).
    `P_next` (m'×m') projects onto the orthogonal complement of the row space of the next linear
    layer's weight gradient (restricted to the kept neurons): every sample's post-ReLU activation
    h_i lies in that row space, since dL/dW_next = Σ_i δ_i h_iᵀ. None when that gradient has rank
    below b (e.g. a classifier with fewer classes than b), where the check does not hold.
    `V_next` (m'×b) is an orthonormal basis of that row space (P_next = I − V Vᵀ).
    `W_next` (m'×m2): the next linear layer's weight, transposed, on the kept neurons (next_weight.py's check of a
    column), where the search reads the next layer.
    """

    L: torch.Tensor
    Ln: torch.Tensor
    R: torch.Tensor
    g: torch.Tensor
    A: torch.Tensor
    bias: torch.Tensor
    rows: torch.Tensor
    noise: float
    P_next: torch.Tensor | None = None
    V_next: torch.Tensor | None = None
    W_next: torch.Tensor | None = None

    @property
    def slack(self) -> float:
        """Relative slack for exactness checks under gradient noise: `Tolerances.noise_multiple` × `noise`.

        Measured: docs/notebook/spear-measurements.md.
        """
        return TOLERANCES.noise_multiple * self.noise

    @property
    def b(self) -> int:
        return int(self.L.shape[1])

    @property
    def m(self) -> int:
        return int(self.L.shape[0])


def factorize(G: torch.Tensor, g: torch.Tensor, W: torch.Tensor, bias: torch.Tensor, b: int,
              *, G_next: torch.Tensor | None = None, W_next: torch.Tensor | None = None,
              dead_tol: float = TOLERANCES.dead_row, next_rank_tol: float = TOLERANCES.next_rank_tol) -> LayerProblem:
    """Drop dead neurons (rows with negligible gradient) and keep the top-b SVD components. `W_next` (m2 × m): the next
    linear layer's weight, kept (transposed, live rows) for the next-layer weight check."""
    G, g, W, bias = (t.to(torch.float64) for t in (G, g, W, bias))
    norms = torch.sqrt((G * G).sum(1) + g * g)
    rows = torch.nonzero(norms > dead_tol * norms.max()).flatten()
    U, S, Vh = top_svd(G[rows], b + 1)
    noise = float(S[b] / S[0]) if S.numel() > b else 0.0
    batch, b = b, visible_rank(S, b)
    spectrum = None if G_next is None else next_spectrum(G_next.to(torch.float64)[:, rows], b, batch, next_rank_tol)
    seen = next_visible_rank(S, spectrum, b, noise)
    if seen < b:  # the samples the next layer does not show count as the noise
        b, noise = seen, float(S[seen] / S[0])
    L = U[:, :b] * S[:b]
    R = Vh[:b]
    Ln = L / L.norm(dim=1, keepdim=True).clamp_min(torch.finfo(L.dtype).tiny)
    V = next_layer_basis(spectrum, b)
    P = None if V is None else torch.eye(V.shape[0], dtype=V.dtype, device=V.device) - V @ V.T
    return LayerProblem(L=L, Ln=Ln, R=R, g=g[rows], A=W[rows] @ R.T, bias=bias[rows], rows=rows,
                        noise=noise, P_next=P, V_next=V,
                        W_next=None if W_next is None else W_next.to(torch.float64)[:, rows].T.contiguous())


def visible_rank(S: torch.Tensor, b: int) -> int:
    """How many of the b samples stand out of the gradient's rounding: the top singular values σ_1 … σ_r
    above `Tolerances.visible_gap`·σ_{b+1}, at least 1 (one visible sample is the closed form of b = 1:
    `attack.one_sample`). b when there is no σ_{b+1}, or when σ_{b+1}/σ_1 is above `Tolerances.rounding_noise`: under
    added noise (a defence) every sample is noisy, and the search's noise slack handles it.

    Measured: docs/notebook/spear-measurements.md.
    """
    if S.numel() <= b or float(S[b]) > TOLERANCES.rounding_noise * float(S[0]):
        return b
    r = b
    while r > 1 and float(S[r - 1]) < TOLERANCES.visible_gap * float(S[b]):
        r -= 1
    return r


class NextSpectrum(NamedTuple):
    """The next layer's gradient (its live columns) as `top_svd` gives it for the batch: singular values S and Vh, and
    the singular value a sample needs to be shown there (`next_floor`)."""

    S: torch.Tensor
    Vh: torch.Tensor
    floor: float


def next_spectrum(G_next: torch.Tensor, b: int, batch: int, rank_tol: float) -> NextSpectrum:
    """`NextSpectrum` of the next layer's gradient G_next (its live columns) for b visible samples of `batch`."""
    _, S, Vh = top_svd(G_next, b)
    return NextSpectrum(S, Vh, next_floor(S, batch, rank_tol))


def next_floor(S_next: torch.Tensor, batch: int, rank_tol: float) -> float:
    """The singular value of the next layer's gradient (S_next) a sample needs to be shown there: rank_tol·σ_1, or
    `Tolerances.visible_gap` times its σ_{batch+1} (its rounding, for the whole batch) when that is lower — the test
    `visible_rank` applies to this layer. Under added noise σ_{batch+1} is high and rank_tol·σ_1 decides.

    Measured: docs/notebook/spear-measurements.md.
    """
    floor = rank_tol * float(S_next[0])
    return min(floor, TOLERANCES.visible_gap * float(S_next[batch])) if S_next.numel() > batch else floor


def next_visible_rank(S: torch.Tensor, spectrum: NextSpectrum | None, b: int, noise: float) -> int:
    """How many of the b visible samples (`visible_rank`; S this layer's singular values) the next layer's gradient
    (`spectrum`) shows too: its singular values above its floor (`next_floor`) — when the ones it does not show are
    weak here as well (σ_{r+1}/σ_1 ≤ `Tolerances.weak_sample`). b otherwise, and b when there is no next layer, when
    it has fewer than b singular values (a narrower layer), or under added noise (`noise`, σ_{b+1}/σ_1 of the batch,
    above `Tolerances.rounding_noise`, as in `visible_rank`): there the column search runs as before.

    Measured: docs/notebook/spear-measurements.md.
    """
    if spectrum is None or noise > TOLERANCES.rounding_noise or spectrum.S.numel() < b:
        return b
    seen = max(1, int((spectrum.S[:b] > spectrum.floor).sum()))
    return seen if float(S[seen]) <= TOLERANCES.weak_sample * float(S[0]) else b


def next_layer_basis(spectrum: NextSpectrum | None, b: int) -> torch.Tensor | None:
    """The top-b right singular vectors V (m'×b) of the next layer's gradient (`spectrum`); None if it shows fewer
    than b samples (σ_b at or under its floor, `next_floor`)."""
    if spectrum is None:
        return None
    S, Vh, floor = spectrum
    if S.numel() < b or S[b - 1] <= floor:
        return None
    return Vh[:b].T


def top_svd(M: torch.Tensor, k: int, *, oversample: int = 10, exact_below: int = 512
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The top singular triplets of M (at least k of them): U, S, Vh like `torch.linalg.svd`.

    Small matrices get the exact SVD. Wide layers (m = 2000 on 64×64×3 inputs: 200 s for the full
    SVD on 2 cores) get the randomized range finder with power iterations (Halko et al.), which is
    exact to rounding for a rank-b gradient; its random start is seeded for determinism.
    """
    if min(M.shape) <= max(exact_below, 4 * (k + oversample)):
        U, S, Vh = torch.linalg.svd(M, full_matrices=False)
        return U, S, Vh
    with torch.random.fork_rng(devices=[M.device] if M.is_cuda else []):
        torch.manual_seed(0)
        U, S, V = torch.svd_lowrank(M, q=k + oversample, niter=4)
    return U, S, V.T


def rank_gap(G: torch.Tensor, b: int) -> float:
    """σ_b / σ_1 of G: tiny when the batch has fewer than b independent inputs."""
    S = torch.linalg.svdvals(G.to(torch.float64))
    return float(S[b - 1] / S[0]) if S.numel() >= b else 0.0
