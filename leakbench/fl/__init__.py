"""What a client shares: the update and the public model (never its images)."""

from leakbench.fl.dp import DPConfig, dp_update
from leakbench.fl.fedavg import FedAvgConfig, fedavg_update
from leakbench.fl.update import ClientUpdate, ThreatModel, fedsgd_update

__all__ = ["ClientUpdate", "DPConfig", "FedAvgConfig", "ThreatModel", "dp_update", "fedavg_update", "fedsgd_update"]
