"""SPEAR and its building blocks (factorisation, sampling, candidate checks, last column, solve)."""

from leakbench.attacks import register_attack
from leakbench.attacks.spear.attack import SpearAttack, SpearConfig

register_attack(SpearAttack)

__all__ = ["SpearAttack", "SpearConfig"]
