"""The ServerApp: Flower's FedAvg for one round (training only), the clients' rate η sent as "lr"."""

from __future__ import annotations

from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from quickstart_capture.task import LR, make_model

NUM_CLIENTS = 2


def make_server_app(num_clients: int = NUM_CLIENTS, rounds: int = 1) -> ServerApp:
    """A ServerApp running FedAvg on `num_clients` clients for `rounds` rounds, no evaluation."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=num_clients,
                          min_available_nodes=num_clients)
        strategy.start(grid=grid, initial_arrays=ArrayRecord(make_model().state_dict()),
                       train_config=ConfigRecord({"lr": LR}), num_rounds=rounds)

    return app


app = make_server_app()
