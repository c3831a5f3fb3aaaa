"""The doors attack (`cheat_doors.py`) as a plugin module for the CLI: `--plugin doors_plugin`."""

from cheat_doors import DoorsAttack

from leakbench.attacks import register_attack

register_attack(DoorsAttack)
