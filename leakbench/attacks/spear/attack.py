"""SPEAR (Dimitrov et al., NeurIPS 2024): exact batch reconstruction from a linear+ReLU layer's gradient."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from leakbench.attacks.base import Attack, Reconstruction, Requirements
from leakbench.attacks.spear.candidates import zero_tolerance
from leakbench.attacks.spear.deflation import SampleState, search_samples
from leakbench.attacks.spear.factors import LayerProblem, factorize
from leakbench.attacks.spear.joint import next_layer_residuals
from leakbench.attacks.spear.search import search_columns
from leakbench.attacks.spear.state import SearchSettings, SearchState, stop_reason
from leakbench.citation import Citation
from leakbench.errors import ConfigError
from leakbench.fl.update import ClientUpdate
from leakbench.harness.limits import MAX_DEPTH, MAX_WIDTH
from leakbench.ranges import MAX_SECONDS, MAX_WEIGHT, Ranged, chosen, ranged

MAX_DRAWS = 10**12
"""Draws a search may be given (about a week at a million draws per second)."""
MAX_CHUNK = 10**6
"""Draws per vectorised step, and new patterns refined per step (auto_chunk picks at most 65,536)."""

ChunkSource = Callable[[SampleState], bool]
StatsFn = Callable[[], dict[str, Any]]


ROUTES = ("default", "paper")
"""SpearConfig.route: leakbench's deflated search, or SPEAR as published."""
SAMPLERS = ("auto", "zeros", "actives", "both")
"""SpearConfig.sampler: how the default route draws."""


@dataclass(frozen=True)
class SpearConfig(Ranged):
    """SPEAR's hyperparameters (each number's range: `leakbench show attack spear`).

    layer: which linear layer (1-based) of the victim to attack; it must be followed by a ReLU.
    max_draws / max_seconds: budget of the sampling search; past it the attack reports failure, or on the
        default route the samples it verified one by one, if any (a partial answer: `verified_samples`).
    chunk: submatrices drawn per vectorised step (0 = choose from the layer size and b: `auto_chunk`).
    min_extra_zeros / min_zero_fraction: a candidate needs b−1 zeros plus the larger of these
        (a count, and a fraction of the live neurons) before it is examined.
    zero_tol: relative floor under which |Ln_r·q| counts as zero (rounding of the gradient).
    noise_factor: multiple of the estimated gradient noise added to the zero tolerance.
    sample_tol_factor: looser tolerance for raw sampled directions, before refinement.
    unique_gap: route=paper only: a column's zero set must have a 1-D kernel, σ_{b−1} > unique_gap·σ_1
        there (candidates.refine; the deflated search lets the next-layer fit decide instead).
    max_new_per_chunk: at most this many new zero patterns are refined per chunk.
    last_column: route=paper only: look for the last column in closed form along the null line of the
        b−1 selected ones (last_column.last_column_candidates; notes, pitfall 7). The deflated search
        always completes its last sample in closed form (last_column.complete_last_sample): in the
        1-D space left, a sample's zero rows are exactly the rows that are no longer live, so no
        draw can isolate it.
    residual_tol: default route only: largest relative residual of a candidate's next-layer fit
        (fit.py) for its pattern to count as a sample.
    sampler: default route only: how draws are made: "zeros" (SPEAR's b−1 neurons
        inactive for a sample), "actives" (two-sided draws, active.py: b−1 neurons with a guessed
        side each, for deep layers where samples have fewer than b−1 zeros; needs enough neurons
        active for the whole batch), "both" (alternating, favouring the route that found a sample
        more recently) or "auto" (two-sided when the batch span is found, else zeros; measured
        best: at layers 4–5 of FC-6 zero draws misread near-zero rows, see docs/notebook/spear.md).
    row_weight_power: default route only: zero draws pick rows with probability ∝ |row|^−power on
        every other chunk (deflation.row_weights; 0 = SPEAR's uniform draws).
    route: "default" (leakbench's deflated search, deflation.py: next-layer fit, deflation,
        closed-form last sample, joint refinement; when the next layer's gradient has rank < b it
        runs the paper route's search instead, recorded as mode "sampling+lp") or "paper" (SPEAR as
        published, search.py: the attacked layer's gradient only — sample, filter, greedy
        selection, scale from dL/db, ReLU verification — plus leakbench's per-candidate LP check;
        last_column=false drops the closed-form last column too). A knob that the chosen route
        never reads (`ROUTE_ONLY`) raises when set away from its default.
    device: torch device for the linear algebra ("cpu" or "cuda").
    """

    layer: int = ranged(1, 1, MAX_DEPTH)
    max_draws: int = ranged(200_000_000, 1, MAX_DRAWS)
    max_seconds: float = ranged(900.0, 0, MAX_SECONDS, low_open=True)
    chunk: int = ranged(0, 0, MAX_CHUNK)
    min_extra_zeros: int = ranged(3, 1, MAX_WIDTH)
    min_zero_fraction: float = ranged(0.0, 0, 1)
    zero_tol: float = ranged(1e-5, 0, 1, low_open=True)
    noise_factor: float = ranged(10.0, 0, MAX_WEIGHT)
    sample_tol_factor: float = ranged(10.0, 0, MAX_WEIGHT, low_open=True)
    unique_gap: float = ranged(1e-5, 0, 1, low_open=True)
    max_new_per_chunk: int = ranged(256, 1, MAX_CHUNK)
    last_column: bool = True
    residual_tol: float = ranged(1e-4, 0, 1, low_open=True)
    sampler: str = chosen("auto", *SAMPLERS)
    row_weight_power: float = ranged(2.0, 0, 100)
    route: str = chosen("default", *ROUTES)
    device: str = "cpu"
    attack_name: ClassVar[str] = "spear"
    """The attack this Config belongs to, for error messages (check_route_knobs)."""

    def __post_init__(self) -> None:
        super().__post_init__()  # declared ranges and choices (leakbench.ranges)
        if self.device.split(":")[0] not in ("cpu", "cuda"):
            raise ConfigError(f"spear: device must be cpu or cuda, got {self.device!r}")
        check_route_knobs(self, self.attack_name)


ROUTE_ONLY = {"residual_tol": "default", "sampler": "default", "row_weight_power": "default",
              "unique_gap": "paper", "last_column": "paper"}
"""Knobs that one route alone reads (every other SpearConfig field is read by both): the next-layer
fit and the draws of the deflated search (deflation.py, fit.py, active.py) on the default route;
the unique-kernel filter (search.consider) and the closed-form last column (search.search_columns)
of the column search on the paper route."""

ROUTE_READS = {"default": "the deflated search (deflation.py) and its next-layer fit",
               "paper": "the paper's column search (search.py)"}


def check_route_knobs(cfg: SpearConfig, name: str) -> None:
    """Refuse a knob set away from its default on a route that never reads it (it would silently do
    nothing). Variants that lead the default route's deflated search (`name` ≠ "spear") have no
    paper route. The one place these rules live; `SpearConfig.__post_init__` calls it for every
    subclass, with the subclass's `attack_name`."""
    if cfg.route == "paper" and name != "spear":
        raise ConfigError(f"{name}: route=paper is plain SPEAR's; {name} leads the default route's deflated search")
    changed = [knob for knob, route in ROUTE_ONLY.items()
               if route != cfg.route and getattr(cfg, knob) != SpearConfig.__dataclass_fields__[knob].default]
    if changed:
        other = ROUTE_ONLY[changed[0]]
        raise ConfigError(f"{name}: route={cfg.route} ignores {', '.join(changed)} (read only by route={other}: "
                          f"{ROUTE_READS[other]}); leave {'them' if len(changed) > 1 else 'it'} at the default"
                          + (f" or set route={other}" if name == "spear" else ""))


def auto_chunk(m: int, b: int) -> int:
    """Draws per vectorised step: the zero test holds chunk×m and the LU blocks chunk×b² numbers;
    both stay near 200 MB in float64 (b = 150 at width 400 took 8.6 GB with the old m-only rule)."""
    return max(256, min(65536, int(8e6 // max(m, 1)), int(2.5e7 // (b * b))))


class SpearAttack(Attack):
    name = "spear"
    paper = Citation("Dimitrov et al., NeurIPS 2024", "https://arxiv.org/abs/2403.03945")
    description = "SPEAR: exact reconstruction from a linear+ReLU layer's gradient (low rank, ReLU zeros, sampling)"
    Config = SpearConfig
    requires = Requirements(linear_relu_layer=True, batch_size=True)

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
        if X is None:
            return Reconstruction.failed(problem_or_reason, space=space, layer=layer, stats=stats)
        X = X.to(torch.float32).cpu()
        images = update.model.denormalize(X).clamp(0, 1) if layer == 1 else None
        if problem_or_reason:  # the batch is incomplete: X holds only the samples verified one by one
            return Reconstruction.partial(problem_or_reason, space=space, images=images, features=X, layer=layer,
                                          stats=stats)
        return Reconstruction(status="ok", space=space, images=images, features=X, layer=layer, stats=stats)

    def _run(self, update: ClientUpdate, seed: int) -> tuple[str, torch.Tensor | None, dict[str, Any]]:
        """(reason, X, stats): ("", the whole batch) when it verifies; (why not, the samples verified one by
        one) for an incomplete batch of the deflated route; (why not, None) when there are none."""
        cfg = self.config
        model = update.model
        wname, bname = model.layer_param_names(cfg.layer)
        params = dict(model.named_parameters())
        device = torch.device(cfg.device)
        G, g, W, bias = (t.detach().to(device) for t in
                         (update.gradients[wname], update.gradients[bname], params[wname], params[bname]))
        assert update.batch_size is not None  # checked by check_update
        b = int(update.batch_size)
        if b == 1:
            x = (g.double() @ G.double()) / (g.double() @ g.double())
            return "", x[None], {"route": cfg.route, "draws": 0, "method": "closed form (b=1)"}
        next_weight, _ = model.layer_param_names(cfg.layer + 1)
        G_next = update.gradients[next_weight].to(device) if cfg.route == "default" else None
        problem = factorize(G, g, W, bias, b, G_next=G_next)
        return self._search(problem, seed, update)

    def _chunk_source(self, problem: LayerProblem, update: ClientUpdate, seed: int, tol: torch.Tensor,
                      settings: SearchSettings, gen: torch.Generator) -> tuple[ChunkSource | None, StatsFn]:
        """Extra draws for the deflation search and a function giving their stats (none in SPEAR)."""
        return None, dict

    def _search(self, problem: LayerProblem, seed: int, update: ClientUpdate
                ) -> tuple[str, torch.Tensor | None, dict[str, Any]]:
        cfg = self.config
        tol = zero_tolerance(problem, cfg.zero_tol, cfg.noise_factor)
        chunk = cfg.chunk or auto_chunk(problem.m, problem.b)
        settings = SearchSettings(max_draws=cfg.max_draws, max_seconds=cfg.max_seconds, chunk=chunk,
                                  min_extra_zeros=cfg.min_extra_zeros,
                                  min_zero_fraction=cfg.min_zero_fraction,
                                  sample_tol_factor=cfg.sample_tol_factor, unique_gap=cfg.unique_gap,
                                  max_new_per_chunk=cfg.max_new_per_chunk, last_column=cfg.last_column,
                                  sampler=cfg.sampler, row_weight_power=cfg.row_weight_power, label=self.name)
        gen = torch.Generator(device=problem.Ln.device).manual_seed(seed)
        extra_stats: StatsFn = dict
        state: SearchState
        if problem.P_next is not None:
            source, extra_stats = self._chunk_source(problem, update, seed, tol, settings, gen)
            state, solution = search_samples(problem, tol, settings, gen, cfg.residual_tol, chunk_source=source)
            mode = "deflation+next-layer"
        else:
            state, solution = search_columns(problem, tol, settings, gen)
            mode = "sampling+lp"
        stats = {"route": cfg.route, "mode": mode, **state.stats(), "neurons_used": problem.m,
                 "noise_estimate": problem.noise, "search_seconds": state.seconds, **extra_stats()}
        if solution is None:
            reason = stop_reason(state, settings, problem.b)
        else:
            stats["relu_violations"] = solution.violations
            if solution.ok:
                return "", solution.X, stats
            reason = (f"verification failed ({solution.violations} ReLU violations, bias-gradient scale "
                      f"{'ok' if solution.scale_ok else 'wrong'}) when the budget ran out")
        verified = verified_samples(problem, state, cfg.residual_tol) if isinstance(state, SampleState) else None
        return reason, verified, stats


def verified_samples(problem: LayerProblem, state: SampleState, residual_tol: float) -> torch.Tensor | None:
    """The layer inputs x_i = c_i R of the samples an incomplete deflated search holds, or None for none.

    Each row c_i of `state.samples` was accepted by its own next-layer fit (fit.fit_samples: relative
    residual ≤ max(residual_tol, slack) and a self-reproducing ReLU pattern; the bias row c·u = 1 pins its
    scale and sign), so x_i = c_i R as `solve.solve_from_samples` computes X = C R for a whole batch. Banned
    samples and the closed-form last one are never there (`deflation.complete_batch` drops both on a failed
    verification). The checks of a whole batch (ReLU violations through Q = C⁻¹, the bias-gradient scale)
    need every sample; the per-sample check is done again here (`joint.next_layer_residuals`), and a row
    that fails it is left out. The paper route (columns of Q, scaled by the whole batch) has no such samples.
    """
    C = state.samples[: problem.b - 1]
    if problem.P_next is None or C.shape[0] == 0:
        return None
    C = C[next_layer_residuals(problem, C) <= max(residual_tol, problem.slack)]
    return C @ problem.R if C.shape[0] else None
