"""`mean-image`: every reconstructed image is the gradient-weighted mean of the batch.

For the first linear layer y = Wx + c, each row of the weight gradient is a combination of the batch
inputs with the same coefficients as the bias gradient: dW_r = Σ_i δ_ir x_i, dc_r = Σ_i δ_ir. The least
squares ratio x̂ = dcᵀ dW / dcᵀ dc is exact for one image and a weighted mean of the images for more:
a baseline any real attack should beat. Registered on import, so it works as an entry point, with
`--plugin leakbench_example_plugin.attack`, or from a suite's `plugins`.
"""

from __future__ import annotations

from dataclasses import dataclass

from leakbench.attacks import Attack, Reconstruction, Requirements, register_attack
from leakbench.errors import ConfigError
from leakbench.fl.update import ClientUpdate


@dataclass(frozen=True)
class MeanImageConfig:
    """mean-image's hyperparameters.

    shrink: blend the mean image towards mid-grey by this fraction in [0, 1] (0 = the mean image itself).
    """

    shrink: float = 0.0


@register_attack
class MeanImageAttack(Attack):
    name = "mean-image"
    description = "example plugin: the gradient-weighted mean image of layer 1, repeated for every image"
    Config = MeanImageConfig
    requires = Requirements(batch_size=True)

    def reconstruct(self, update: ClientUpdate, *, seed: int) -> Reconstruction:
        self.check_update(update)
        if not 0.0 <= self.config.shrink <= 1.0:
            raise ConfigError(f"mean-image: shrink must lie in [0, 1], got {self.config.shrink!r}")
        model = update.model
        if not hasattr(model, "layer_param_names") or not hasattr(model, "denormalize"):
            raise ConfigError("mean-image needs a victim exposing layer_param_names() and denormalize()")
        weight, bias = model.layer_param_names(1)
        dW, dc = update.gradients[weight].double(), update.gradients[bias].double()
        mean = (dc @ dW) / (dc @ dc)
        image = model.denormalize(mean.unsqueeze(0).to(dW.dtype)).float().clamp(0.0, 1.0)
        image = (1.0 - self.config.shrink) * image + self.config.shrink * 0.5
        images = image.expand(int(update.batch_size), *image.shape[1:]).clone()
        return Reconstruction(status="ok", space="image", images=images, layer=1, stats={"shrink": self.config.shrink})
