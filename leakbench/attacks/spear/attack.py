"""SPEAR (Dimitrov et al., NeurIPS 2024): exact batch reconstruction from a linear+ReLU layer's gradient.

Two attacks on one base, `SpearSearch` (the checks, the factorised layer, the answer; each typed in its
own Config, `Attack[C]`). `spear`: leakbench's deflated search (`DeflatedSpear`, scheduler.py) with SPEAR's
own proposal sources; spear-guided and spear-dl extend `DeflatedSpear` with more sources and settings of
their own. `spear-paper`: SPEAR as published (`SpearSearch`'s own column search), the baseline
the other variants are ranked against — the attacked layer's gradient only: sample (b−1)-row submatrices
of L, filter the kernels by their zero sets, select b columns greedily in two stages, scale them from
dL/db, verify the ReLU pattern; a failed verification means "keep sampling" until the budget runs out
(search.search_columns). No next-layer fit, no deflation. leakbench's two additions to this route are
off by default and named: the per-candidate LP check (`lp_check`, candidates.pattern_margin) and the
closed-form last column (`last_column`, last_column.last_column_candidates).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch
from typing_extensions import TypeVar

from leakbench.attacks.base import AGGREGATES, Attack, Reconstruction, Requirements
from leakbench.attacks.spear.active import find_batch_span
from leakbench.attacks.spear.applicability import signature, structure_refusal
from leakbench.attacks.spear.candidates import zero_tolerance
from leakbench.attacks.spear.factors import LayerProblem, factorize
from leakbench.attacks.spear.guided_columns import ColumnGuides
from leakbench.attacks.spear.joint import next_layer_residuals
from leakbench.attacks.spear.samples import SampleState, nearest_known
from leakbench.attacks.spear.scheduler import ProposalSource, Scheduler, default_sources, search_samples
from leakbench.attacks.spear.search import ColumnState, search_columns
from leakbench.attacks.spear.solve import Solution
from leakbench.attacks.spear.stall import MIN_ZERO_FRACTION, StallRule
from leakbench.attacks.spear.state import (
    FAILURE_STAT,
    SearchSettings,
    SearchState,
    charge_before,
    stop_failure,
    stop_reason,
)
from leakbench.core.citation import Citation
from leakbench.core.errors import ConfigError
from leakbench.core.limits import MAX_DEPTH
from leakbench.core.ranges import MAX_SECONDS, Ranged, chosen, ranged
from leakbench.fl.update import ClientUpdate

MAX_DRAWS = 10**12
"""Draws a search may be given (about a week at a million draws per second)."""
MAX_CHUNK = 10**6
"""Draws per vectorised step, and new patterns refined per step (auto_chunk picks at most 65,536)."""

SAMPLERS = ("auto", "zeros", "actives", "both")
"""SpearConfig.sampler: how SPEAR's own draws are made (scheduler.py)."""


@dataclass(frozen=True)
class SearchBudget(Ranged):
    """What every SPEAR-family attack is given: the layer, the budget and the device (each number's
    range: `leakbench show attack spear`). The search's fixed tolerances are not hyperparameters:
    tolerances.py.

    layer: which linear layer (1-based) of the victim to attack; it must be followed by a ReLU.
    max_draws / max_seconds: budget of the search; past it the attack reports failure (or, on the
        deflated search, the samples it verified one by one: a partial answer, `verified_samples`).
    chunk: submatrices drawn per vectorised step (0 = choose from the layer size and b: `auto_chunk`).
    device: torch device for the linear algebra ("cpu" or "cuda").
    """

    layer: int = ranged(1, 1, MAX_DEPTH)
    max_draws: int = ranged(200_000_000, 1, MAX_DRAWS)
    max_seconds: float = ranged(900.0, 0, MAX_SECONDS, low_open=True)
    chunk: int = ranged(0, 0, MAX_CHUNK)
    device: str = "cpu"

    def __post_init__(self) -> None:
        super().__post_init__()  # declared ranges and choices (leakbench.core.ranges)
        if self.device.split(":")[0] not in ("cpu", "cuda"):
            raise ConfigError(f"{self.attack_name}: device must be cpu or cuda, got {self.device!r}")

    attack_name: ClassVar[str] = "spear"
    """The attack this Config belongs to, for error messages."""


@dataclass(frozen=True)
class SpearConfig(SearchBudget):
    """SPEAR's hyperparameters: `SearchBudget`'s, and how its own draws are made (scheduler.py).

    sampler: "zeros" (SPEAR's b−1 neurons inactive for a sample), "actives" (two-sided draws,
        active.py: b−1 neurons with a guessed side each, for deep layers where samples have fewer
        than b−1 zeros; needs enough neurons active for the whole batch), "both" (alternating,
        favouring the route that found a sample more recently) or "auto" (two-sided when the batch
        span is found, else zeros; measured best: at layers 4–5 of FC-6 zero draws misread
        near-zero rows, see docs/notebook/spear.md).
    row_weight_power: zero draws pick rows with probability ∝ |row|^−power on every other chunk
        (scheduler.ZeroDraws.weights; 0 = SPEAR's uniform draws).
    """

    sampler: str = chosen("auto", *SAMPLERS)
    row_weight_power: float = ranged(2.0, 0, 100)


def auto_chunk(m: int, b: int) -> int:
    """Draws per vectorised step: the zero test holds chunk×m and the LU blocks chunk×b² numbers;
    both stay near 200 MB in float64 (b = 150 at width 400 took 8.6 GB with the old m-only rule)."""
    return max(256, min(65536, int(8e6 // max(m, 1)), int(2.5e7 // (b * b))))


BudgetT = TypeVar("BudgetT", bound=SearchBudget, default=SearchBudget)
"""The Config of a SPEAR-family attack."""
SpearConfigT = TypeVar("SpearConfigT", bound=SpearConfig, default=SpearConfig)
"""The Config of an attack on the deflated search: SPEAR's own sources' settings, and its own."""


class SpearSearch(Attack[BudgetT]):
    """What every SPEAR-family attack shares: the checks, the factorised layer, the answer; the search is
    SPEAR's published column search (`_find`) unless a subclass extends it (`DeflatedSpear`). Each
    subclass gives its budget and tolerances (`_settings`) from its own Config."""

    paper = Citation("Dimitrov et al., NeurIPS 2024", "https://arxiv.org/abs/2403.03945")
    requires = Requirements(linear_relu_layer=True, batch_size=True)
    aware_of = AGGREGATES  # the aggregate of K clients is one batch of K·b: SPEAR attacks it as it is
    uses_next_layer: ClassVar[bool] = False
    """Whether the search reads the next layer's gradient (the deflated search fits every candidate through it)."""

    def check_update(self, update: ClientUpdate) -> None:
        super().check_update(update)
        if self.config.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError("spear: device cuda requested but torch sees no GPU")
        model = update.model  # linear+ReLU layer and batch size: checked by Attack.check_update
        weight, _ = model.layer_param_names(self.config.layer)
        m, n = update.gradients[weight].shape
        b = update.batch_size
        assert b is not None  # Requirements(batch_size=True): checked by super().check_update
        if b >= m or b > n:
            raise ConfigError(f"spear needs batch size < layer width and ≤ input size; got b={b}, "
                              f"width {m}, input size {n} at layer {self.config.layer}")

    def reconstruct(self, update: ClientUpdate, *, seed: int) -> Reconstruction:
        self.check_update(update)
        start = time.perf_counter()
        layer = self.config.layer
        problem_or_reason, X, stats = self._run(update, seed)
        stats["seconds"] = time.perf_counter() - start
        space = self.reconstructs(layer)
        failure = stats.pop(FAILURE_STAT, None)  # the search's own word for why it has no batch (`_search`)
        if X is None:
            return Reconstruction.failed(problem_or_reason, failure=failure, space=space, layer=layer, stats=stats)
        X = X.to(torch.float32).cpu()
        images = update.model.denormalize(X).clamp(0, 1) if layer == 1 else None
        if problem_or_reason:  # the batch is incomplete: X holds only the samples verified one by one
            return Reconstruction.partial(problem_or_reason, space=space, images=images, features=X, layer=layer,
                                          stats=stats)
        return Reconstruction(status="ok", space=space, images=images, features=X, layer=layer, stats=stats)

    def _run(self, update: ClientUpdate, seed: int) -> tuple[str, torch.Tensor | None, dict[str, Any]]:
        """(reason, X, stats): ("", the whole batch) when it verifies; (why not, the samples verified one by
        one) for an incomplete batch of the deflated route; (why not, None) when there are none."""
        assert update.batch_size is not None  # checked by check_update
        b = int(update.batch_size)
        if b == 1:
            G, g, _, _ = self._layer(update)
            return "", one_sample(G, g), {"draws": 0, "method": "closed form (b=1)"}
        problem = self.layer_problem(update)
        X: torch.Tensor | None
        if problem.b == 1:  # one visible sample (b' = 1): Q is 1×1, fixed by dL/db, as for b = 1
            G, g, _, _ = self._layer(update)
            reason, X, stats = "", one_sample(G, g), {"draws": 0, "method": "closed form (one visible sample)"}
        else:
            verdict = None if self.answers_anyway() else structure_refusal(problem, self._layer(update)[0])
            if verdict is not None and not verdict.applicable:  # fail fast, before any search (applicability.py)
                return verdict.reason, None, {"mode": "not applicable", "draws": 0, **verdict.stats,
                                             FAILURE_STAT: "not-applicable"}
            reason, X, stats = self._search(problem, seed, update)
        hidden = b - problem.b
        if hidden:
            stats["samples_at_noise_level"] = hidden
            noise = (f"{hidden} of {b} samples are not visible in the gradient (their share is at its rounding "
                     f"level, or they repeat other samples)")
            reason = f"{reason} ({noise})" if reason else f"{noise}; the other {problem.b} verified"
        return reason, X, stats

    def layer_problem(self, update: ClientUpdate) -> LayerProblem:
        """The factorised layer this attack searches for `update` (b ≥ 2): its layer's gradient, weights and
        bias on the configured device, with the next layer's gradient where the search reads it."""
        G, g, W, bias = self._layer(update)
        G_next = W_next = None
        if self.uses_next_layer:
            next_weight, _ = update.model.layer_param_names(self.config.layer + 1)
            G_next = update.gradients[next_weight].to(G.device)
            W_next = dict(update.model.named_parameters())[next_weight].detach().to(G.device)
            if W_next.dim() != 2 or W_next.shape[1] != G.shape[0]:  # not a linear layer on this one's outputs
                W_next = None
        assert update.batch_size is not None  # checked by check_update
        return factorize(G, g, W, bias, int(update.batch_size), G_next=G_next, W_next=W_next)

    def _layer(self, update: ClientUpdate) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(dL/dW, dL/db, W, bias) of the attacked layer, detached, on the configured device."""
        wname, bname = update.model.layer_param_names(self.config.layer)
        params = dict(update.model.named_parameters())
        device = torch.device(self.config.device)
        G, g, W, bias = (t.detach().to(device) for t in
                         (update.gradients[wname], update.gradients[bname], params[wname], params[bname]))
        return G, g, W, bias

    @abstractmethod
    def _settings(self, problem: LayerProblem) -> SearchSettings:
        """The run's budget, tolerances and search options, from this attack's Config."""

    def _search(self, problem: LayerProblem, seed: int, update: ClientUpdate
                ) -> tuple[str, torch.Tensor | None, dict[str, Any]]:
        settings = replace(self._settings(problem), stall=self._stall_rule(problem, update))
        tol = zero_tolerance(problem, settings.tolerances.zero_tol, settings.tolerances.noise_factor)
        gen = torch.Generator(device=problem.Ln.device).manual_seed(seed)
        state, solution, extra_stats, mode = self._find(problem, seed, update, tol, settings, gen)
        stats = {"mode": mode, **state.stats(), "neurons_used": problem.m, "noise_estimate": problem.noise,
                 "search_seconds": state.seconds, **extra_stats}
        if solution is None:
            charged = charge_before(settings, extra_stats)  # the cap as the search ran under it
            reason, stats[FAILURE_STAT] = stop_reason(state, charged, problem.b), stop_failure(state)
        else:
            stats["relu_violations"] = solution.violations
            if solution.ok:
                return "", solution.X, {**stats, "verified": True} if self.answers_unverified() else stats
            stop = f"the search stopped: {state.stalled}" if state.stalled else "the budget ran out"
            reason = (f"verification failed ({solution.violations} ReLU violations, bias-gradient scale "
                      f"{'ok' if solution.scale_ok else 'wrong'}) when {stop}")
            stats[FAILURE_STAT] = "verification"
        if self.answers_unverified() and state.time_capped:  # stopped by the clock (load-dependent): no answer
            reason, stats[FAILURE_STAT] = stop_reason(state, settings, problem.b), "budget"
        best = unverified_answer(state) if self.answers_unverified() else None
        if best is not None:  # the approximate forms' answer: the whole batch, marked unverified
            kept = {k: v for k, v in stats.items() if k != FAILURE_STAT}  # an answer, not a failure
            return "", best.X, {**kept, "verified": False, "relu_violations": best.violations,
                                "unverified_reason": reason}
        return reason, self._verified(problem, state, settings), stats

    def answers_anyway(self) -> bool:
        """Whether this form answers on a defended update whatever its structure shows: the adaptive forms (an
        attack with `adapts_to`) exist for those defences and the approximate ones (`answers_unverified`) answer
        their best batch; neither is refused before the search (applicability.py) nor stopped by the stall rule."""
        return bool(self.adapts_to) or self.answers_unverified()

    def _stall_rule(self, problem: LayerProblem, update: ClientUpdate) -> StallRule | None:
        """The stall rule (stall.py) where the attacked gradient shows a defence (`applicability.signature`: values
        on few levels, or at least `MIN_ZERO_FRACTION` of its live entries exact zeros) and this form does not answer
        anyway; None elsewhere (the search runs to its budget, as before)."""
        if self.answers_anyway():
            return None
        shown, stats = signature(self._layer(update)[0])
        defended = stats["value_levels"] is not None or stats["unexplained_zero_fraction"] >= MIN_ZERO_FRACTION
        return StallRule(problem.b, shown) if defended else None

    def answers_unverified(self) -> bool:
        """Whether a search whose batch never verifies answers with its best one (the column search's selection
        with the fewest ReLU violations, `search.ColumnState.best`) as status "ok" with `stats["verified"]` False
        instead of failing; the approximate forms (`SpearPaperConfig.return_unverified`) do."""
        return False

    def _verified(self, problem: LayerProblem, state: SearchState, settings: SearchSettings) -> torch.Tensor | None:
        """The inputs of the samples an incomplete search verified one by one, or None: SPEAR's column search
        verifies none on its own (its columns are scaled by the whole batch)."""
        return None

    def _find(self, problem: LayerProblem, seed: int, update: ClientUpdate, tol: torch.Tensor,
              settings: SearchSettings, gen: torch.Generator
              ) -> tuple[SearchState, Solution | None, dict[str, Any], str]:
        """(state, solution, stats, mode) of the search: SPEAR's column search (search.search_columns)."""
        state, solution = search_columns(problem, tol, settings, gen)
        return state, solution, {}, "sampling+lp" if settings.lp_check else "sampling"


class DeflatedSpear(SpearSearch[SpearConfigT]):
    """leakbench's deflated search (scheduler.py): the proposal sources of a subclass (`_sources`) before
    SPEAR's own draws (`SpearConfig.sampler`), each candidate fitted through the next layer's gradient;
    the column search where that gradient's rank is below b. spear, spear-guided and spear-dl."""

    uses_next_layer = True

    def _sources(self, problem: LayerProblem, update: ClientUpdate, seed: int, tol: torch.Tensor,
                 settings: SearchSettings) -> tuple[list[ProposalSource], dict[str, Any]]:
        """The proposal sources asked before SPEAR's own (scheduler.py), and stats known before the
        search (none in SPEAR; a guide's name and seconds in spear-guided)."""
        return [], {}

    def _settings(self, problem: LayerProblem) -> SearchSettings:
        """The run's budget and tolerances; the deflated search's fallback (next-layer gradient of rank
        below b) runs the column search with leakbench's LP check and closed-form last column."""
        cfg = self.config
        return SearchSettings(max_draws=cfg.max_draws, max_seconds=cfg.max_seconds,
                              chunk=cfg.chunk or auto_chunk(problem.m, problem.b), last_column=True, lp_check=True,
                              next_weight_check=True, label=self.name)

    def _find(self, problem: LayerProblem, seed: int, update: ClientUpdate, tol: torch.Tensor,
              settings: SearchSettings, gen: torch.Generator
              ) -> tuple[SearchState, Solution | None, dict[str, Any], str]:
        """The deflated search where the next layer's gradient has rank b (`problem.P_next`), else the column
        search with leakbench's LP check and closed-form last column (`_settings`)."""
        if problem.P_next is None:
            propose, stats = self._column_sources(problem, update, seed, tol, settings)
            if propose is None:
                return super()._find(problem, seed, update, tol, settings, gen)
            columns, found = search_columns(problem, tol, charge_before(settings, stats), gen, propose)
            return columns, found, {**stats, **propose.stats()}, "sampling+lp+guide"
        state, solution, stats = self._deflated(problem, seed, update, tol, settings, gen)
        return state, solution, stats, "deflation+next-layer"

    def _column_sources(self, problem: LayerProblem, update: ClientUpdate, seed: int, tol: torch.Tensor,
                        settings: SearchSettings) -> tuple[ColumnGuides | None, dict[str, Any]]:
        """The proposal source the column search asks before SPEAR's own draws where the next layer's gradient has
        rank below b (FC-2: the classifier), and stats known before the search: none in SPEAR; the guide's
        (guided_columns.ColumnGuides, leakbench's guided column search) in spear-guided."""
        return None, {}

    def _verified(self, problem: LayerProblem, state: SearchState, settings: SearchSettings) -> torch.Tensor | None:
        """The samples the deflated search verified one by one (`verified_samples`); none where the column search
        ran instead."""
        if not isinstance(state, SampleState):
            return super()._verified(problem, state, settings)
        return verified_samples(problem, state, settings.tolerances.residual_tol)

    def _deflated(self, problem: LayerProblem, seed: int, update: ClientUpdate, tol: torch.Tensor,
                  settings: SearchSettings, gen: torch.Generator
                  ) -> tuple[SampleState, Solution | None, dict[str, Any]]:
        """The deflated search with this attack's sources before SPEAR's own; its state, solution and stats."""
        cfg = self.config
        leading, stats = self._sources(problem, update, seed, tol, settings)
        span = find_batch_span(problem) if cfg.sampler != "zeros" else None
        scheduler = Scheduler([*leading, *default_sources(cfg.row_weight_power, span, cfg.sampler)])
        settings = charge_before(settings, stats)  # the guide's seconds count against the search's time cap
        state, solution = search_samples(problem, tol, settings, gen, settings.tolerances.residual_tol, scheduler)
        return state, solution, {"two_sided_draws": 0, "two_sided_route": span is not None, **stats,
                                 **scheduler.stats()}


class SpearAttack(DeflatedSpear[SpearConfig]):
    name = "spear"
    description = "SPEAR: exact reconstruction from a linear+ReLU layer's gradient (low rank, ReLU zeros, sampling)"
    Config = SpearConfig


@dataclass(frozen=True)
class SpearPaperConfig(SearchBudget):
    """`SearchBudget`'s hyperparameters plus the published selection's and leakbench's two additions.

    second_stage: the paper's second greedy stage (select.improve_by_swaps) after the first.
    lp_check: leakbench addition: accept a candidate only if an LP finds a sample with its ReLU pattern
        (then the first complete selection is final).
    last_column: leakbench addition: look for the last column in closed form along the null line of
        the b−1 selected ones (notes, pitfall 7).
    return_unverified: when no selection verifies within the budget, answer with the whole batch of the
        selection with the fewest ReLU violations, unverified (status "ok", `stats["verified"]` False), as the
        paper scores SPEAR under noise (the PSNR of its approximate reconstruction); off: report failure
        (spear-paper's default, so its exact verdicts stay what they were; `spear-approx` turns it on).
    """

    second_stage: bool = True
    lp_check: bool = False
    last_column: bool = False
    return_unverified: bool = False
    attack_name: ClassVar[str] = "spear-paper"


class SpearPaperAttack(SpearSearch[SpearPaperConfig]):
    name = "spear-paper"
    description = ("SPEAR as published: sampling, sparsity filter, two-stage greedy selection, scale from dL/db "
                   "and ReLU verification, on the attacked layer's gradient only")
    Config = SpearPaperConfig

    def _settings(self, problem: LayerProblem) -> SearchSettings:
        cfg = self.config
        return SearchSettings(max_draws=cfg.max_draws, max_seconds=cfg.max_seconds,
                              chunk=cfg.chunk or auto_chunk(problem.m, problem.b), last_column=cfg.last_column,
                              lp_check=cfg.lp_check, second_stage=cfg.second_stage, label=self.name)

    def answers_unverified(self) -> bool:
        return self.config.return_unverified


def unverified_answer(state: SearchState) -> Solution | None:
    """The approximate forms' answer when no selection verified: the column search's selection with the fewest ReLU
    violations (`ColumnState.best`), or None — on the deflated route, and when the search stopped on its time cap
    (`SearchState.time_capped`: which selections it had checked by then depends on the machine's load, so the
    answer is left out and the cell fails with kind "budget")."""
    if not isinstance(state, ColumnState) or state.time_capped:
        return None
    return state.best


def one_sample(G: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The input of the one sample a rank-1 gradient holds: x = (g·G)/(g·g), G = dL/dW and g = dL/db (each row of
    G is g_r x); (1, n)."""
    x = (g.double() @ G.double()) / (g.double() @ g.double())
    return x[None]


def verified_samples(problem: LayerProblem, state: SampleState, residual_tol: float) -> torch.Tensor | None:
    """The layer inputs x_i = c_i R of the samples an incomplete deflated search holds, or None for none.

    Each row c_i of `state.samples` was accepted by its own next-layer fit (fit.fit_samples: relative
    residual ≤ max(residual_tol, slack) and a self-reproducing ReLU pattern; the bias row c·u = 1 pins its
    scale and sign), so x_i = c_i R as `solve.solve_from_samples` computes X = C R for a whole batch. Banned
    samples and the closed-form last one are never there (`completion.complete_batch` drops both on a failed
    verification). The checks of a whole batch (ReLU violations through Q = C⁻¹, the bias-gradient scale)
    need every sample; the per-sample check is done again here (`joint.next_layer_residuals`), and a row
    that fails it is left out. The fits set aside as outliers among the found samples (`acceptance.set_aside`)
    passed the same fit and come too, unless they are near-copies of a found sample. The paper route (columns of
    Q, scaled by the whole batch) has no such samples.
    """
    apart = [c for c in state.outliers if nearest_known(c, state.samples) is None]
    C = torch.cat([state.samples, *(c[None] for c in apart)])[: problem.b - 1]
    if problem.P_next is None or C.shape[0] == 0:
        return None
    C = C[next_layer_residuals(problem, C) <= max(residual_tol, problem.slack)]
    return C @ problem.R if C.shape[0] else None
