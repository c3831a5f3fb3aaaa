"""spear-paper: SPEAR as published (Dimitrov et al., NeurIPS 2024), the baseline the other variants are ranked against.

The attacked layer's gradient only: sample (b−1)-row submatrices of L, filter the kernels by their zero
sets, select b columns greedily in two stages, scale them from dL/db, verify the ReLU pattern; a failed
verification means "keep sampling" until the budget runs out (search.search_columns). No next-layer fit,
no deflation. leakbench's two additions to this route are off by default and named: the per-candidate LP
check (`lp_check`, candidates.pattern_margin) and the closed-form last column (`last_column`,
last_column.last_column_candidates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from leakbench.attacks.spear.attack import SearchBudget, SpearAttack, auto_chunk
from leakbench.attacks.spear.factors import LayerProblem
from leakbench.attacks.spear.state import SearchSettings


@dataclass(frozen=True)
class SpearPaperConfig(SearchBudget):
    """`SearchBudget`'s hyperparameters plus the published selection's and leakbench's two additions.

    second_stage: the paper's second greedy stage (select.improve_by_swaps) after the first.
    lp_check: leakbench addition: accept a candidate only if an LP finds a sample with its ReLU pattern
        (then the first complete selection is final).
    last_column: leakbench addition: look for the last column in closed form along the null line of
        the b−1 selected ones (notes, pitfall 7).
    """

    second_stage: bool = True
    lp_check: bool = False
    last_column: bool = False
    attack_name: ClassVar[str] = "spear-paper"


class SpearPaperAttack(SpearAttack):
    name = "spear-paper"
    description = ("SPEAR as published: sampling, sparsity filter, two-stage greedy selection, scale from dL/db "
                   "and ReLU verification, on the attacked layer's gradient only")
    Config = SpearPaperConfig
    uses_next_layer = False

    def _settings(self, problem: LayerProblem) -> SearchSettings:
        cfg = self.config
        return SearchSettings(max_draws=cfg.max_draws, max_seconds=cfg.max_seconds,
                              chunk=cfg.chunk or auto_chunk(problem.m, problem.b), last_column=cfg.last_column,
                              lp_check=cfg.lp_check, second_stage=cfg.second_stage, label=self.name)
