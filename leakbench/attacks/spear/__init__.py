"""SPEAR and its building blocks (factorisation, sampling, candidate checks, last column, solve)."""

from leakbench.attacks import register_attack
from leakbench.attacks.spear.attack import SpearAttack, SpearConfig
from leakbench.attacks.spear.dl_attack import SpearDLAttack, SpearDLConfig
from leakbench.attacks.spear.guided_attack import GuidedSpearAttack, GuidedSpearConfig

register_attack(SpearAttack)
register_attack(GuidedSpearAttack)
register_attack(SpearDLAttack)

__all__ = ["GuidedSpearAttack", "GuidedSpearConfig", "SpearAttack", "SpearConfig", "SpearDLAttack",
           "SpearDLConfig"]
