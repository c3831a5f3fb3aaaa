"""Stop a search early when the update shows a defence and SPEAR's draws stop finding samples (issue 44: fail fast).

`applicability.structure_refusal` refuses before the search only where the structure provably cannot be seen (too
few neurons above the noise floor for one draw). Mild pruning and 8-bit quantisation pass that test: their exact
zeros are mostly kept, SPEAR recovers some batches under them (small b), and the search runs. Where it cannot
recover the batch, it used to spend its whole budget (CIFAR-10 FC-6 w200 b = 16, prune 0.2 and 8-bit: 60 s of a 60 s
cap, 3,600 s under a suite's default budget), drawing millions of directions none of which was a sample.

The stall rule: on an update whose values show a defence (`applicability.signature`: values on few levels, or exact
zeros no dead row or column explains, at least `MIN_ZERO_FRACTION` of them), the search stops once it has drawn
`factor` times the draws the next sample takes where SPEAR's structure holds without finding more samples than it
had. That expectation is the idealised model of `theory.py`: each missing sample is inactive on half the neurons,
so a draw of r rows isolates a given one with probability 2^−r and one of the `missing` with probability
missing · 2^−r. A draw takes r = b − 1 rows in the column search (`search.ColumnState`) and b − k − 1 in the
deflated one once k samples are known (`SearchState.draw_rows`). The stop is a count of draws, never of seconds:
the same seed stops at the same draw on every machine. The factor is wide because real batches are not the model:
under prune 0.2 (CIFAR-10 FC-6 w200 b = 16, seed 2) guided SPEAR found its first sample at 117× the expectation,
and 13 more within the next 280,000 draws.

What it does not do: at large b with many samples missing, 2^r is astronomic and the rule never fires (the budget
stops the search, as before); on an update that shows no defence (a trained victim at float32's edge) it is off.
"""

from __future__ import annotations

from dataclasses import dataclass

STALL_FACTOR = 200.0
"""Draws without a new sample, in units of the draws the next sample takes where SPEAR's structure holds."""
MIN_STALL_DRAWS = 100_000
"""The fewest draws without a new sample after which the rule may stop a search (a few seconds of draws at width 200,
and several of the guided search's chunks)."""
MIN_ZERO_FRACTION = 0.01
"""Exact zeros among the live entries of the attacked gradient from which it shows pruning to the rule (a few arise
without a defence where inputs are exactly zero: raw pixels, features after a ReLU)."""


@dataclass(frozen=True)
class StallRule:
    """Stop a search for b samples after `limit(rows, missing)` draws without a new best count of found samples;
    `evidence` is what the update shows of a defence, in words (`applicability.signature`), quoted in the reason."""

    b: int
    evidence: str
    factor: float = STALL_FACTOR
    min_draws: int = MIN_STALL_DRAWS

    def limit(self, rows: int, missing: int) -> float:
        """Draws without progress after which the search stops: `factor` × 2^rows / missing, at least `min_draws`."""
        return max(float(self.min_draws), self.factor * 2.0 ** min(rows, 1000) / max(missing, 1))

    def reason(self, draws: int, rows: int, missing: int) -> str:
        """Why the search stopped, after `draws` draws without a new sample (appended to `state.stop_reason`'s)."""
        return (f"no new sample in the last {draws} draws, {self.factor:g}× the {2.0 ** rows / max(missing, 1):.3g} "
                f"the next one takes where SPEAR's exact zeros hold ({missing} missing, {rows} rows a draw); "
                f"the update shows a defence: {self.evidence}")
