"""What a client shares: the update and the public model (never its images)."""

from leakbench.fl.update import ClientUpdate, ThreatModel, fedsgd_update

__all__ = ["ClientUpdate", "ThreatModel", "fedsgd_update"]
