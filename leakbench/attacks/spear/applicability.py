"""Whether an update can have SPEAR's structure, checked before any search (issue 44: fail fast).

SPEAR finds a sample as a direction q whose image L q has at least b − 1 exact zeros (the neurons inactive for
it), and it tells a zero from a non-zero entry by its zero test (`candidates.zero_tolerance`): |Ln_r · q| under the
rounding floor plus `Tolerances.noise_factor` times the noise the spectrum's tail implies (σ_{b+1}/σ_1,
`factors.factorize`). A neuron whose tolerance reaches its own row's norm divided by `Tolerances.live_rows` is at the
noise level for *every* direction: the deflated search neither draws nor counts it (`deflation.reduced_rows`). When
fewer than b − 1 neurons stand above that floor, no draw of b − 1 rows can be made and no direction can show a
sample's zeros: the update cannot be attacked by SPEAR's zero draws, whatever the budget. `structure_refusal` says
so in words before the search starts (the guide of `spear-guided`, the column search of `spear-paper`, the draws),
as a failure of kind "not-applicable" (`core.reconstruction.Failure`), in the seconds of the factorisation.

The test refuses only where that structure provably cannot be seen, never on a defence's mere presence: SPEAR
recovers batches under mild pruning, 8-bit quantisation and small noise (measured, CIFAR-10 FC-6 at init: prune
p = 0.2 and 8-bit at width 200, b = 4, every image at 44–56 dB but one; 8-bit at width 400, b = 8, 6 of 8 at
36–54 dB), and the floor rule leaves those to the search. What the update looks like is said alongside, as the
reason's evidence (`signature`): values on few levels (quantised, `quantisation_levels`), exact zeros in live rows
and columns (pruned, `unexplained_zeros`; at layer 1 the ReLU structure zeroes whole rows only).

The adaptive forms (`spear-approx`, `spear-masked`, `spear-unmix`, `spear-demix`: an attack with `adapts_to`) are
never refused here: they exist for these defences (`SpearSearch._run` skips the check for them), nor is an
approximate form (`spear-paper` with `return_unverified`, as the paper scores SPEAR under noise), which answers its
best batch whether or not the structure shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from leakbench.attacks.spear.candidates import zero_tolerance
from leakbench.attacks.spear.deflation import reduced_rows
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.state import NOT_APPLICABLE
from leakbench.attacks.spear.tolerances import TOLERANCES, Tolerances

MAX_LEVELS = 1 << 16
"""An update whose attacked gradient takes at most this many distinct values is on a grid of levels (quantised: a
float32 gradient of the smallest layer SPEAR runs on, 100 × 3,072 entries, has hundreds of thousands)."""
LEVEL_SAMPLE = 1 << 20
"""Entries of the gradient whose distinct values are counted (a fixed, evenly strided subset of a larger one)."""
LEVEL_SHARE = 8
"""Entries per distinct value, on average, from which values on few levels are a grid (`quantisation_levels`)."""


@dataclass(frozen=True)
class Applicability:
    """The pre-search verdict: `reason` "" when SPEAR's search may run, else why not, in words starting
    "not applicable: "; `stats` the numbers behind it (kept in the failed answer's stats)."""

    reason: str
    stats: dict[str, Any]

    @property
    def applicable(self) -> bool:
        return not self.reason


def rows_above_floor(problem: LayerProblem, tolerances: Tolerances = TOLERANCES) -> int:
    """The neurons that stand above the zero test's noise floor, by the deflated search's own rule before any
    sample is found (`deflation.reduced_rows` with the identity basis): only these can be drawn or tell a zero
    from a non-zero entry."""
    tol = zero_tolerance(problem, tolerances.zero_tol, tolerances.noise_factor)
    basis = torch.eye(problem.b, dtype=problem.L.dtype, device=problem.L.device)
    return int(reduced_rows(problem, basis, tol)[2].sum())


def quantisation_levels(G: torch.Tensor, *, max_levels: int = MAX_LEVELS, sample: int = LEVEL_SAMPLE) -> int | None:
    """How many distinct non-zero values the gradient G takes (counted on at most `sample` evenly strided entries),
    when they are a grid of levels: at most `max_levels`, each held by `LEVEL_SHARE` entries or more on average (a
    pruned gradient has few non-zero entries, each its own value); None otherwise (an unquantised gradient)."""
    flat = G.detach().reshape(-1)
    flat = flat[:: max(1, flat.numel() // sample)]
    flat = flat[flat != 0]
    levels = int(torch.unique(flat).numel())
    return levels if 0 < levels <= max_levels and levels * LEVEL_SHARE <= flat.numel() else None


def unexplained_zeros(G: torch.Tensor) -> float:
    """The fraction of exact zeros among G's entries in its live rows and live columns (rows and columns with a
    non-zero entry). A dead neuron zeroes its whole row and an input zero for the whole batch its whole column; at
    layer 1 (pixels, never all exactly zero) nothing else is exactly zero, so these are a zeroing defence's
    (pruning). At deeper layers a ReLU feature zero for the samples a neuron is active for gives some too."""
    nonzero = G.detach() != 0
    live = nonzero[nonzero.any(1)][:, nonzero.any(0)]
    return float(1 - live.float().mean()) if live.numel() else 0.0


def signature(G: torch.Tensor) -> tuple[str, dict[str, Any]]:
    """What the gradient G shows of a defence, in words ("" when nothing) and as stats: its values on few levels,
    its exact zeros no dead row or column explains."""
    levels, zeros = quantisation_levels(G), unexplained_zeros(G)
    words = [f"its values take {levels} levels (quantised)" if levels is not None else "",
             f"{zeros:.1%} of its live entries are exact zeros (pruned)" if zeros > 0 else ""]
    return "; ".join(w for w in words if w), {"value_levels": levels, "unexplained_zero_fraction": zeros}


def structure_refusal(problem: LayerProblem, G: torch.Tensor, tolerances: Tolerances = TOLERANCES) -> Applicability:
    """Whether SPEAR's search can see its structure in this factorised layer (`problem`, b ≥ 2 visible samples; G
    the attacked layer's weight gradient as shared): not applicable when fewer than b − 1 neurons stand above the
    zero test's noise floor (`rows_above_floor`), since a draw needs b − 1 of them and a sample's zeros cannot be
    told apart below it; the reason gives the noise estimate and what the update shows of a defence (`signature`)."""
    above, need = rows_above_floor(problem, tolerances), problem.b - 1
    stats: dict[str, Any] = {"noise_estimate": problem.noise, "rows_above_floor": above, "rows_needed": need}
    if above >= need:
        return Applicability("", stats)
    shown, evidence = signature(G)
    reason = (f"{NOT_APPLICABLE}: the gradient's noise (σ_b+1/σ_1 = {problem.noise:.2g}) is above SPEAR's zero test: "
              f"only {above} of {problem.m} neurons stand above its floor and a draw needs {need}"
              + (f"; {shown}" if shown else ""))
    return Applicability(reason, {**stats, **evidence})
