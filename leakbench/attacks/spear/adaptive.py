"""SPEAR's adaptive forms (leakbench's, not published): `spear-approx` under noise, DP and quantisation,
`spear-masked` under pruning and Soteria.

Both run SPEAR's published column search (`spear-paper`, search.search_columns) and answer, when no selection
verifies, with the selection that has the fewest ReLU violations: the whole batch, status "ok" with
`stats["verified"]` False (`SpearPaperConfig.return_unverified`). An unverified batch is never a partial answer
(a partial answer holds verified samples only, `Reconstruction.partial`).

- `spear-approx`: the paper scores SPEAR under DP noise by the PSNR of its approximate reconstruction; leakbench's
  `spear-paper` reports failure there instead (σ = 1e-5 on FC-6 w400, b = 8: ReLU violations at verification). The
  noise already widens the zero tolerance (`candidates.zero_tolerance`); what the form adds is the answer.
- `spear-masked`: a zeroing defence (pruning, Soteria) replaces entries of a shared tensor by exact zeros, which the
  attacker sees. Under the threat model `defence_known` (`attacks.adaptive.nonzero_masks`) those entries are
  unknowns, not zeros: the attacked layer's weight gradient G = Dᵀ X has rank b, so its zeroed entries are filled
  by low-rank matrix completion from the observed ones (`complete_low_rank`, alternating least squares), and the
  bias gradient g = Dᵀ1, which lies in G's column space, from its observed entries (`complete_in_span`); then the
  usual factorisation and search run. A column of G with no observed entry (Soteria at the first layer zeroes whole
  pixel columns) cannot be completed: the ReLU check, which needs that input, cannot pass — the answer is then
  unverified (stats `unobserved_inputs`), and at layer 1 those pixels are filled from their neighbours (`inpaint`,
  an image prior: nothing in the update shows them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from leakbench.attacks.spear.attack import MAX_DRAWS, SpearPaperAttack, SpearPaperConfig
from leakbench.attacks.spear.candidates import canonical, noise_std, one_per_direction
from leakbench.attacks.spear.factors import LayerProblem, top_svd
from leakbench.attacks.spear.sampling import draw_directions
from leakbench.attacks.spear.search import ColumnState
from leakbench.attacks.spear.select import improve_by_swaps, select_independent
from leakbench.attacks.spear.solve import Solution, solve_batch
from leakbench.attacks.spear.state import SearchSettings, SearchState, out_of_budget, search_bar, show_progress
from leakbench.core.ranges import ranged
from leakbench.fl.update import ClientUpdate

APPROX_ADAPTS_TO = frozenset({"noise", "dp", "uniform-quantise", "quantise", "qsgd"})
"""The defences that perturb every entry (noise, DP-SGD, quantisation — `quantise` is the retired name cells
stored before issue 43 carry —, QSGD): `spear-approx` answers under them."""
MASKED_ADAPTS_TO = frozenset({"prune", "soteria", "soteria-first"})
"""The zeroing defences (`attacks.adaptive.ZEROING`) whose zeros `spear-masked` treats as unknowns."""


@dataclass(frozen=True)
class SpearApproxConfig(SpearPaperConfig):
    """spear-paper's hyperparameters with `return_unverified` on: the best whole batch when none verifies.

    max_draws: the budget of the search, in draws. Under added noise the noise-aware search stops once b columns
        are kept and `approx_patience` chunks in a row changed none, or when the draws are spent (then it selects
        from what it kept); at the rounding level, spear-paper's search stops when a selection verifies or the
        draws are spent. Work, not time, so a seed gives the same answer on any machine and load. Default
        2,000,000 (b = 16 under DP σ = 0.1 at CIFAR-10 FC-6 w200: 200,000 draws in about 10 s on one core).
    max_seconds: a safety cap on wall-clock time, not a budget: a search that hits it before its draws are spent
        answers nothing (failed, kind "budget"; `SearchState.time_capped`), since where the clock stops it depends
        on the machine's load.
    """

    max_draws: int = ranged(2_000_000, 1, MAX_DRAWS)
    return_unverified: bool = True
    attack_name: ClassVar[str] = "spear-approx"


@dataclass(frozen=True)
class SpearMaskedConfig(SpearApproxConfig):
    """spear-approx's hyperparameters; the zeroed entries are completed before the search (module doc)."""

    attack_name: ClassVar[str] = "spear-masked"


class SpearApproxAttack(SpearPaperAttack):
    """SPEAR's column search with a noise-aware refinement under added noise, answering with its best unverified
    batch (module doc); leakbench's adaptive form."""

    name = "spear-approx"
    description = ("SPEAR with a noise-aware zero test, answering with its best whole batch, unverified, when the ReLU "
                   "check fails under noise, DP or quantisation, as the paper scores SPEAR under noise (leakbench's "
                   "adaptive form, not published)")
    Config = SpearApproxConfig
    adapts_to = APPROX_ADAPTS_TO

    def _find(self, problem: LayerProblem, seed: int, update: ClientUpdate, tol: torch.Tensor,
              settings: SearchSettings, gen: torch.Generator
              ) -> tuple[SearchState, Solution | None, dict[str, Any], str]:
        """spear-paper's column search on a gradient at its rounding level; under added noise (σ_{b+1}/σ_1 above
        `Tolerances.rounding_noise`) the noise-aware one (`noisy_column_search`)."""
        if problem.noise <= settings.tolerances.rounding_noise:
            return super()._find(problem, seed, update, tol, settings, gen)
        state, solution = noisy_column_search(problem, settings, gen)
        return state, solution, {}, "sampling+noise-aware"


class SpearMaskedAttack(SpearApproxAttack):
    """SPEAR on the gradients completed where a known zeroing defence zeroed them (module doc); leakbench's
    adaptive form. Without a listed zeroing defence nothing is completed (it is `spear-approx`)."""

    name = "spear-masked"
    description = ("SPEAR treating the entries a pruning or Soteria defence zeroed as unknowns: low-rank completion "
                   "of the layer's gradient, then the search; best whole batch, unverified, when the check fails "
                   "(leakbench's adaptive form, not published)")
    Config = SpearMaskedConfig
    adapts_to = MASKED_ADAPTS_TO

    def _layer(self, update: ClientUpdate) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """spear's (dL/dW, dL/db, W, bias), with the entries a known zeroing defence zeroed completed."""
        G, g, W, bias = super()._layer(update)
        observed_G, observed_g = self._observed(update)
        assert update.batch_size is not None  # checked by check_update
        b = int(update.batch_size)
        if observed_G is not None and not bool(observed_G.all()):
            G = complete_low_rank(G.double(), observed_G.to(G.device), b)
        if observed_g is not None and not bool(observed_g.all()):
            g = complete_in_span(G.double(), g.double(), observed_g.to(g.device), b)
        return G, g, W, bias

    def _observed(self, update: ClientUpdate) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The masks (True: observed) of the attacked layer's weight and bias gradients that a known zeroing
        defence may have zeroed (`attacks.adaptive.nonzero_masks`); None for a tensor no listed defence touched."""
        from leakbench.attacks.adaptive import nonzero_masks  # adaptive imports the registry's attacks

        masks = nonzero_masks(update)
        wname, bname = update.model.layer_param_names(self.config.layer)
        return masks.get(wname), masks.get(bname)

    def _run(self, update: ClientUpdate, seed: int) -> tuple[str, torch.Tensor | None, dict[str, Any]]:
        """spear-approx's answer on the completed layer; inputs no gradient entry shows are filled in from their
        neighbours in the image (`inpaint`) where the attacked layer reads the image."""
        reason, X, stats = super()._run(update, seed)
        observed_G, observed_g = self._observed(update)
        stats["completed_entries"] = sum(int((~m).sum()) for m in (observed_G, observed_g) if m is not None)
        unseen = None if observed_G is None else ~observed_G.any(0)
        stats["unobserved_inputs"] = 0 if unseen is None else int(unseen.sum())
        if X is not None and unseen is not None and bool(unseen.any()) and self.config.layer == 1:
            X = inpaint(X.cpu().double(), unseen.cpu(), tuple(update.model.input_shape))
        return reason, X, stats


def complete_low_rank(G: torch.Tensor, observed: torch.Tensor, rank: int, *, iterations: int = 200,
                      rtol: float = 1e-14) -> torch.Tensor:
    """G (m×n) with its unobserved entries (`observed` False) filled by the rank-`rank` matrix that fits the
    observed ones (alternating least squares from the zero-filled SVD; each step solves one b×b system per row,
    then per column). Observed entries are kept as given. A row or column with no observed entry gets 0 there
    (a small ridge keeps its system solvable). The start is exact where a block of rows and columns is fully
    observed (`anchor_block`: its top-`rank` SVD gives the column space on those rows, every column's coefficients
    follow); else the zero-filled SVD. Stops when the observed-entry residual stops falling by more than
    `rtol` relative to the observed norm, or after `iterations`.
    """
    M = observed.to(G.dtype)
    Gm = G * M
    scale = float(Gm.norm()) or 1.0
    ridge = 1e-12 * torch.eye(rank, dtype=G.dtype, device=G.device)
    rows, cols = anchor_block(observed, rank)
    if rows is None:
        U, S, Vh = top_svd(Gm, rank)
        left, right = U[:, :rank] * S[:rank], Vh[:rank].T
    else:  # the fully observed block fixes the column space on its rows exactly; every column follows from it
        U, S, _ = top_svd(G[rows][:, cols], rank)
        left = torch.zeros(G.shape[0], rank, dtype=G.dtype, device=G.device)
        left[rows] = U[:, :rank] * S[:rank]
        right = _least_squares_rows(M.T * (left.abs().sum(1) > 0).to(G.dtype), Gm.T, left, ridge)
    M_left = M * (observed.sum(0) >= 2 * rank).to(G.dtype)  # columns seen too rarely do not move the rows
    last = float("inf")
    for _ in range(iterations):
        left = _least_squares_rows(M_left, Gm * M_left, right, ridge)
        right = _least_squares_rows(M.T, Gm.T, left, ridge)
        residual = float(((left @ right.T - G) * M).norm()) / scale
        if last - residual <= rtol:
            break
        last = residual
    return torch.where(observed, G, left @ right.T)


def anchor_block(observed: torch.Tensor, rank: int) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The largest set of rows (the most observed first, halving their number from all of them down to 2·rank)
    with at least 2·rank columns observed in every one of them: (row indices, column mask), or (None, mask) when
    there is none. A pruned gradient keeps its large entries, so its strong rows share many observed columns."""
    order = observed.sum(1).argsort(descending=True)
    k = observed.shape[0]
    while k >= 2 * rank:
        cols = observed[order[:k]].all(0)
        if int(cols.sum()) >= 2 * rank:
            return order[:k], cols
        k = k * 3 // 4
    return None, torch.zeros(observed.shape[1], dtype=torch.bool, device=observed.device)


def _least_squares_rows(M: torch.Tensor, Gm: torch.Tensor, basis: torch.Tensor, ridge: torch.Tensor) -> torch.Tensor:
    """Per row r of Gm (masked by M): argmin_u Σ_j M_rj (Gm_rj − basis_j·u)², with `ridge` added (one batched
    solve of the normal equations)."""
    k = basis.shape[1]
    outer = (basis[:, :, None] * basis[:, None, :]).reshape(basis.shape[0], k * k)
    normal = (M @ outer).reshape(-1, k, k) + ridge
    solved: torch.Tensor = torch.linalg.solve(normal, (Gm @ basis)[..., None])[..., 0]
    return solved


def complete_in_span(G: torch.Tensor, g: torch.Tensor, observed: torch.Tensor, rank: int) -> torch.Tensor:
    """The bias gradient g (m) with its unobserved entries filled: g = Dᵀ1 lies in the column space of G = DᵀX
    (its top-`rank` left singular vectors U), so g = U w with w fitted on the observed entries."""
    U, _, _ = top_svd(G, rank)
    U = U[:, :rank]
    w = torch.linalg.lstsq(U[observed], g[observed][:, None]).solution[:, 0]
    return torch.where(observed, g, U @ w)


def refine_noisy(L: torch.Tensor, q: torch.Tensor, threshold: float, rounds: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Noise-aware refinement of directions q (k, b): `rounds` times, the zero set {r : |L_r·q| ≤ threshold} on L's
    unnormalised rows (the noise on L_r·q is the same for every row, while on a unit row it grows as the row shrinks)
    and the smallest right singular vector of L on it. Returns the unit directions and their zero masks (k, m)."""
    for _ in range(rounds):
        zero = (q @ L.T).abs() <= threshold
        q = torch.linalg.svd(L.unsqueeze(0) * zero.unsqueeze(-1).to(L.dtype), full_matrices=False)[2][:, -1, :]
    return canonical(q), (q @ L.T).abs() <= threshold


def noisy_column_search(problem: LayerProblem, settings: SearchSettings, gen: torch.Generator
                        ) -> tuple[ColumnState, Solution | None]:
    """SPEAR's column search under added noise (leakbench's): draw (b−1)-row kernels as SPEAR does, refine the
    `approx_per_chunk` with the most zeros of each chunk by `refine_noisy` (zeros: |L_r·q| ≤ `approx_zero_sigmas`
    × the noise std), keep those with at least `approx_zero_fraction`·m zeros as columns (one per direction within
    `approx_same`, the one with more zeros); once b independent columns are kept and `approx_patience` chunks in a
    row changed no column (or the draw budget is spent), select b of them as spear-paper does (sparsest first, then the
    paper's second greedy stage, `select.improve_by_swaps`), scale and check them (`solve.solve_batch`) and stop.
    The exact test's relative tolerance (`candidates.zero_tolerance`) counts nearly every neuron of a weak row as
    zero under noise, so the exact refinement drifts off the true columns (measured: none of 511 columns within
    cos 0.99 of a true one at σ = 1e-5, CIFAR-10 FC-6 w400, b = 8).
    The stopping rule counts work only (chunks of draws), so a seed gives the same batch on any machine and load;
    the time cap (`max_seconds`) is a safety net: hit before the selection, the search ends with no batch
    (`SearchState.time_capped`, a failure of kind "budget").
    Returns the state (`best`: the batch checked) and that solution, or None when the budget ran out first."""
    t = settings.tolerances
    L, b = problem.L, problem.b
    threshold = t.approx_zero_sigmas * noise_std(problem)
    state = ColumnState(columns=torch.empty(0, b, dtype=L.dtype, device=L.device))
    zeros = torch.empty(0, dtype=torch.long, device=L.device)
    need = int(t.approx_zero_fraction * problem.m)
    solution: Solution | None = None
    quiet = 0  # chunks in a row that kept no new column and improved none
    with search_bar(problem, settings) as bar:
        while solution is None and not out_of_budget(state, settings):
            count = min(settings.chunk, settings.max_draws - state.draws)
            q = draw_directions(problem.Ln, b, count, gen)
            state.draws += count
            q = q[torch.isfinite(q).all(dim=1)]
            if state.columns.shape[0]:  # draws onto columns already kept add nothing
                q = q[(q / q.norm(dim=1, keepdim=True) @ state.columns.T).abs().amax(1) < 1 - t.approx_same]
            hits = ((q @ L.T).abs() <= threshold).sum(1)
            q = q[hits.argsort(descending=True)]
            q = q[one_per_direction(q, t.approx_same, t.approx_per_chunk)]
            state.candidates += int(q.shape[0])
            q, zero = refine_noisy(L, q, threshold, t.approx_rounds)
            count_zero = zero.sum(1)
            keep = count_zero >= need
            state.patterns += int(keep.sum())
            before = zeros.clone()
            for direction, z in zip(q[keep], count_zero[keep].tolist(), strict=True):
                same = (state.columns @ direction).abs() >= 1 - t.approx_same
                if bool(same.any()):
                    i = int(torch.nonzero(same)[0])
                    if z > int(zeros[i]):
                        state.columns[i], zeros[i] = direction, z
                    continue
                state.columns = torch.cat([state.columns, direction[None]])
                zeros = torch.cat([zeros, zeros.new_tensor([z])])
            show_progress(bar, state, settings)
            quiet = quiet + 1 if zeros.shape == before.shape and bool((zeros == before).all()) else 0
            chosen = select_independent(state.columns, zeros, b, rtol=t.select_rtol)
            if chosen.numel() == b and (quiet >= t.approx_patience or state.draws >= settings.max_draws):
                tol = threshold_tol(problem, threshold)
                chosen = improve_by_swaps(problem, state.columns, chosen, zeros, tol)
                solution = solve_batch(problem, state.columns[chosen.sort().values].T, tol)
                state.best = solution
    return state, solution


def threshold_tol(problem: LayerProblem, threshold: float) -> torch.Tensor:
    """The absolute zero threshold as the per-row relative tolerance on |Ln_r·q| that `solve.solve_batch` reads."""
    tol: torch.Tensor = threshold / problem.L.norm(dim=1).clamp_min(torch.finfo(problem.L.dtype).tiny)
    return tol


def inpaint(X: torch.Tensor, unseen: torch.Tensor, shape: tuple[int, ...], *, rounds: int = 300) -> torch.Tensor:
    """X (b, n: flat normalised images of `shape` C×H×W) with the `unseen` coordinates (n) filled by harmonic
    inpainting: `rounds` times, each unseen pixel becomes the mean of its 4 neighbours in its channel (edges
    replicated), the seen ones stay. An image prior, not information from the gradient (Soteria at layer 1 zeroes
    whole pixel columns: those pixels are not in the update at all)."""
    images = X.reshape(-1, *shape).clone()
    hole = unseen.reshape(shape)[None].expand_as(images)
    images[hole] = 0.0
    for _ in range(rounds):
        padded = torch.nn.functional.pad(images, (1, 1, 1, 1), mode="replicate")
        mean = (padded[..., :-2, 1:-1] + padded[..., 2:, 1:-1] + padded[..., 1:-1, :-2] + padded[..., 1:-1, 2:]) / 4
        images = torch.where(hole, mean, images)
    return images.reshape(X.shape)
