"""A flat grey image per sample: the smallest attack, for tests of the API and the leaderboard (a module of
its own so that pool workers import it by name)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from leakbench.attacks import Attack, Reconstruction


@dataclass(frozen=True)
class GreyConfig:
    """level: the grey level of every reconstructed image."""

    level: float = 0.5


class GreyAttack(Attack):
    name, description, Config = "api-grey", "a flat grey image per sample (test)", GreyConfig

    def reconstruct(self, update, *, seed):
        shape = (update.batch_size or 1, *update.model.input_shape)
        return Reconstruction("ok", "image", images=torch.full(shape, self.config.level))
