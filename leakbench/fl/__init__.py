"""What a client shares: the update and the public model (never its images).

The update transforms (`leakbench.fl.transform`: FedSGD, FedAvg, DP-SGD, additive noise, pruning,
quantisation (QSGD, uniform), Soteria, MixUp, secure aggregation, and defence plugins) are registered
when this package is imported.
"""

from leakbench.fl.dp import DPConfig, dp_update
from leakbench.fl.fedavg import FedAvgConfig, fedavg_update
from leakbench.fl.flower import FlowerFedSGDConfig  # registers the Flower clients (flwr is imported when one runs)
from leakbench.fl.mixup import MixUpBatchConfig, MixUpConfig
from leakbench.fl.model_check import CheckModelConfig  # registers check-model (issue 46)
from leakbench.fl.noise import NoiseConfig
from leakbench.fl.precode import PrecodeConfig
from leakbench.fl.prune import PruneConfig
from leakbench.fl.qsgd import QSGDConfig
from leakbench.fl.quantise import QuantiseConfig
from leakbench.fl.secagg import SecAggConfig
from leakbench.fl.soteria import SoteriaConfig
from leakbench.fl.transform import TRANSFORMS, Client, UpdateTransform, client_update, register_transform
from leakbench.fl.transform import admit_transform as _admit
from leakbench.fl.update import ClientUpdate, ThreatModel, fedsgd_update
from leakbench.plugins import serve

serve("defences", TRANSFORMS, _admit, "an UpdateTransform subclass")  # the shipped transforms are in

__all__ = ["TRANSFORMS", "CheckModelConfig", "Client", "ClientUpdate", "DPConfig", "FedAvgConfig", "FlowerFedSGDConfig",
           "MixUpBatchConfig", "MixUpConfig",
           "NoiseConfig", "PrecodeConfig", "PruneConfig", "QSGDConfig", "QuantiseConfig", "SecAggConfig",
           "SoteriaConfig", "ThreatModel", "UpdateTransform", "client_update", "dp_update", "fedavg_update",
           "fedsgd_update", "register_transform"]
