"""Attacks, one registry. `create_attack(name, **hyperparameters)` builds a configured attack.

The registry and its functions live in `leakbench.attacks.registry`; importing this package registers
the shipped attacks and hands the registry to the plugin loader (`leakbench.plugins.serve`).
"""

from __future__ import annotations

from leakbench.attacks.base import Attack, Reconstruction, Requirements
from leakbench.attacks.registry import (
    ATTACKS,
    admit_attack,
    attack_budget,
    attack_class,
    create_attack,
    list_attacks,
    register_attack,
)
from leakbench.core.settings import build_config  # noqa: F401  (re-exported: `from leakbench.attacks import build_config`)
from leakbench.plugins import serve

__all__ = ["ATTACKS", "Attack", "Reconstruction", "Requirements", "attack_budget", "attack_class", "create_attack",
           "list_attacks", "register_attack"]

# The shipped attacks register on import (after the names above: `attacks.spear` imports them from here).
from leakbench.attacks import adaptive as _adaptive  # noqa: F401  (ig-masked, dlg-masked)
from leakbench.attacks import cpa as _cpa  # noqa: F401
from leakbench.attacks import dequant as _dequant  # noqa: F401  (ig-dequant, dlg-dequant)
from leakbench.attacks import fishing as _fishing  # noqa: F401  (class fishing, Wen et al.: a malicious server's)
from leakbench.attacks import gradient_matching as _gradient_matching  # noqa: F401
from leakbench.attacks import imprint as _imprint  # noqa: F401  (Robbing the Fed: a malicious server's)
from leakbench.attacks import peeling as _peeling  # noqa: F401  (LT-code peeling, Shariati & Alambardar Meybodi)
from leakbench.attacks import presets as _presets  # noqa: F401  (cpa-released, ig-breaching)
from leakbench.attacks import spear as _spear  # noqa: F401  (registers on import)
from leakbench.attacks import trap as _trap  # noqa: F401  (trap weights, Boenisch et al.: a malicious server's)

serve("attacks", ATTACKS, admit_attack, "an Attack subclass")  # the shipped attacks are in
