"""A small linear+ReLU problem on the embedded images for SPEAR's unit tests (its ground truth beside it)."""

from __future__ import annotations

import torch

from leakbench.attacks.spear.factors import LayerProblem, factorize
from leakbench.datasets import load_dataset, sample_batch
from leakbench.fl import fedsgd_update
from leakbench.fl.update import ThreatModel
from leakbench.models import build_fc


def layer_problem(b: int, width: int, seed: int = 0) -> tuple[LayerProblem, torch.Tensor]:
    """Layer 1 of an FC-3 of `width` at init on `b` embedded images: the factorised problem (with the next
    layer's gradient) and the layer's true inputs X (b, n), float64."""
    ds = load_dataset("embedded")
    batch = sample_batch(ds, b, seed=seed)
    model = build_fc(ds.image_shape, ds.num_classes, width=width, depth=3, seed=seed)
    update = fedsgd_update(model, batch, ThreatModel())
    w, bn = model.layer_param_names(1)
    w2, _ = model.layer_param_names(2)
    params = dict(model.named_parameters())
    problem = factorize(update.gradients[w], update.gradients[bn], params[w].detach(), params[bn].detach(), b,
                        G_next=update.gradients[w2])
    with torch.no_grad():
        X = model.layer_inputs(batch.images, 1).flatten(1).double()
    return problem, X
