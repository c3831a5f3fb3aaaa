"""Secure aggregation over K clients: the server sees only the aggregate of K clients' updates.

Secure aggregation (Bonawitz, Ivanov, Kreuter, Marcedone, McMahan, Patel, Ramage, Segal, Seth,
"Practical Secure Aggregation for Privacy-Preserving Machine Learning", CCS 2017) lets the server learn
the sum of the clients' updates and nothing about any one of them. Its cryptography (masking, secret
sharing, dropouts) is not simulated: only what it reveals is, the aggregate.

Here each of K clients holds its own private batch of b images (`cell.draw.draw_batch` draws K
disjoint batches; client 0's is the batch of the same cell with one client) and computes its FedSGD
update; the server receives their **mean** (the sum divided by K, which the server knows: K is
public in secure aggregation). With equal batches the mean of the K FedSGD gradients (each the
gradient of its batch's mean loss) is exactly the FedSGD gradient of the mean loss over all K·b
images, so an attack on the aggregate faces one batch of K·b images: the update carries
`batch_size` K·b when the threat model grants the batch size, and the batch's labels in client order
when it grants the labels. The cell's ground truth is all K·b images. K = 1 is plain FedSGD. A cell's
additive noise and defences apply to the aggregate, once (not to each client's update); shared
BatchNorm statistics (`ThreatModel.bn_stats_shared`) are aggregated too (their mean).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch

from leakbench.core.citation import Citation
from leakbench.core.ranges import Ranged, ranged
from leakbench.fl.transform import Client, UpdateTransform, register_transform
from leakbench.fl.update import ClientUpdate, ThreatModel, fedsgd_update

if TYPE_CHECKING:  # annotations only: importing the datasets package loads every loader
    from leakbench.datasets.base import Batch
    from leakbench.models.base import ImageVictim


MAX_CLIENTS = 10_000
"""Clients of one secure aggregation: at most 10,000 (their K·b images must also fit in the dataset)."""


@dataclass(frozen=True)
class SecAggConfig(Ranged):
    """Secure aggregation.

    clients: K, the number of clients whose updates the server sees only as their mean (1: plain FedSGD).
    """

    clients: int = ranged(2, 1, MAX_CLIENTS)
    owner: ClassVar[str] = "secagg"


def secagg_update(model: ImageVictim, batches: list[Batch], threat: ThreatModel = ThreatModel()) -> ClientUpdate:
    """The mean of the FedSGD updates of `model` on each of `batches` (one per client); `model` is not modified.
    Only each client's gradients (and shared buffers) are kept, not its copy of the model: K = 100 clients of a
    victim behind a wide imprint block (issue 46) would otherwise hold 100 models."""
    first = fedsgd_update(model, batches[0], threat)
    gradients, buffers = [first.gradients], [first.buffers]
    for batch in batches[1:]:
        update = fedsgd_update(model, batch, threat)
        gradients.append(update.gradients)
        buffers.append(update.buffers)
    mean = {name: torch.stack([g[name] for g in gradients]).mean(0) for name in first.gradients}
    total = sum(batch.size for batch in batches)
    return ClientUpdate(
        model=first.model,
        gradients=mean,
        threat=threat,
        batch_size=total if threat.batch_size_known else None,
        labels=torch.cat([batch.labels for batch in batches]) if threat.labels_known else None,
        kind="secagg",
        buffers=_mean_buffers(buffers),
    )


def _mean_buffers(buffers: list[dict[str, torch.Tensor] | None]) -> dict[str, torch.Tensor] | None:
    """The clients' shared BatchNorm statistics as the aggregate carries them: the mean of each float
    buffer, integer counters (batches tracked) as the first client's; None when not shared."""
    first = buffers[0]
    if first is None:
        return None
    return {name: torch.stack([b[name] for b in buffers if b is not None]).mean(0) if value.is_floating_point()
            else value for name, value in first.items()}


@register_transform
class SecAgg(UpdateTransform):
    """Secure aggregation: the server sees only the mean of K clients' FedSGD updates (Bonawitz et al., CCS 2017)."""

    paper = Citation("Bonawitz et al., CCS 2017", "https://eprint.iacr.org/2017/281")
    name = "secagg"
    Config = SecAggConfig
    config: SecAggConfig
    makes_update = True

    def clients(self) -> int:
        return self.config.clients

    def apply(self, update: ClientUpdate | None, client: Client) -> ClientUpdate:
        from leakbench.datasets.base import split_batch

        return secagg_update(client.model, split_batch(client.batch, self.config.clients), client.threat)

    def label(self) -> str:
        return f"secagg K={self.config.clients}"
