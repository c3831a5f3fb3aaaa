"""QSGD: stochastic quantisation of every shared tensor, bucket by bucket, as published.

Alistarh, Grubic, Li, Tomioka & Vojnovic, "QSGD: Communication-Efficient SGD via Gradient
Quantization and Encoding", NeurIPS 2017. Each tensor is flattened and cut into buckets of d
consecutive entries (§4: "the i-th bucket is the sub-vector v[(i−1)d+1 : i·d]"; the last bucket may be
shorter). Each bucket v is quantised on its own (§3, Q_s):

    Q_s(v_i) = ‖v‖₂ · sign(v_i) · ξ_i(v, s),

with s levels: for l the integer with |v_i|/‖v‖₂ ∈ [l/s, (l+1)/s], ξ_i = (l+1)/s with probability
|v_i|/‖v‖₂ · s − l and l/s otherwise. So E[Q_s(v)] = v (unbiased), signs are kept, an exact zero stays
exactly zero (l = 0, probability 0), and a zero bucket stays zero. The server receives each bucket's
scale and its entries' signs and levels.

Settings and where their defaults come from:

- `levels` s (1 … 2^24, default 256). The paper counts a b-bit QSGD as s = 2^b levels (§4: "a bucket
  size of 512, and 4 bits, the variance increase … is upper bounded by √512 / 2^4"), so 8-bit is
  s = 256, 4-bit s = 16, 2-bit s = 4; s = 1 keeps only each entry's sign, zero and the bucket norm.
- `bucket` d (0 … 2^24, default 512; 0: the whole tensor is one bucket, the theory's d = n). The
  paper's experiments (§5) use 2-bit with d = 128 and 4-bit and 8-bit with d = 512 ("8-bit gradients
  with 512 bucket size have been sufficient to recover or improve upon the full-precision accuracy").
- `norm`: "l2" (the default: the algorithm and its guarantees, Lemma 3.1) or "max" — §4's
  implementation "scale[s] by the maximum value of the vector (as opposed to the 2-norm)" in its
  experiments; ξ is then drawn for |v_i| / max|v|.

The draws come from a generator seeded with the client's seed: same seed, same update. The paper
also leaves gradient tensors under 10 K entries unquantised for speed (§5); leakbench quantises every
shared tensor (a defence that left small layers in the clear would leak them). The update's `kind`
gains "+qsgd".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from leakbench.core.citation import Citation
from leakbench.core.ranges import Ranged, chosen, ranged
from leakbench.fl.transform import Client, UpdateTransform, register_transform
from leakbench.fl.update import ClientUpdate

MAX_LEVELS = 2**24
"""At most 2^24 levels: float32 holds every l/s·s exactly."""
MAX_BUCKET = 2**24
NORMS = ("l2", "max")
"""Each bucket's scale: its 2-norm (the algorithm) or its largest |entry| (the paper's experiments)."""


def qsgd(g: torch.Tensor, levels: int, bucket: int, gen: torch.Generator, norm: str = "l2") -> torch.Tensor:
    """`g` quantised by QSGD: flattened, cut into buckets of `bucket` entries (0: one bucket), each bucket v
    replaced by scale·sign(v_i)·ξ_i with ξ_i ∈ {l/s, (l+1)/s} drawn so that E = v (s = `levels`; scale
    ‖v‖₂, or max|v| for norm "max")."""
    flat = g.reshape(-1)
    n = flat.numel()
    if n == 0:
        return g.clone()
    d = bucket or n
    padded = torch.cat([flat, flat.new_zeros((-n) % d)]).reshape(-1, d)  # zero padding: no norm, no draw
    scale = padded.norm(dim=1, keepdim=True) if norm == "l2" else padded.abs().amax(dim=1, keepdim=True)
    position = padded.abs() / torch.where(scale > 0, scale, 1.0) * levels  # in [0, s]
    lower = position.floor()
    up = torch.rand(padded.shape, generator=gen, dtype=g.dtype) < (position - lower)
    xi = (lower + up.to(g.dtype)) / levels
    quantised: torch.Tensor = (scale * torch.sign(padded) * xi).reshape(-1)[:n].reshape(g.shape)
    return quantised


@dataclass(frozen=True)
class QSGDConfig(Ranged):
    """QSGD (Alistarh et al., NeurIPS 2017).

    levels: s, the quantisation levels per sign (1..2^24; the paper's b bits are s = 2^b: 256 is 8-bit).
    bucket: d, the entries per bucket (consecutive in the flattened tensor; 0: the whole tensor). The
        paper's experiments: 512 for 4 and 8 bits, 128 for 2 bits.
    norm: each bucket's scale, "l2" (‖v‖₂, as published) or "max" (max |v|, the paper's experiments).
    """

    levels: int = ranged(256, 1, MAX_LEVELS)
    bucket: int = ranged(512, 0, MAX_BUCKET)
    norm: str = chosen("l2", *NORMS)
    owner: ClassVar[str] = "qsgd"


@register_transform
class QSGD(UpdateTransform):
    """QSGD (Alistarh et al., NeurIPS 2017): per bucket of d entries, stochastic rounding to s levels of ‖v‖₂."""

    paper = Citation("Alistarh et al., NeurIPS 2017", "https://arxiv.org/abs/1610.02132")
    name = "qsgd"
    Config = QSGDConfig
    config: QSGDConfig

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        assert update is not None
        gen = torch.Generator().manual_seed(client.seed)
        c = self.config
        grads = {name: qsgd(g, c.levels, c.bucket, gen, c.norm) for name, g in update.gradients.items()}
        return update.with_gradients(grads, "qsgd")

    def label(self) -> str:
        c = self.config
        return f"qsgd s={c.levels} d={c.bucket}" + ("" if c.norm == "l2" else f" norm={c.norm}")
