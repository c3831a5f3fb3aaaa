"""Victim networks. Normalisation happens inside the model, once; inputs are images in [0, 1]."""

from leakbench.models.fc import FCNet, build_fc

__all__ = ["FCNet", "build_fc"]
