"""`python -m quickstart_capture.simulate`: one round of the app in Flower's Simulation Runtime (Ray, local)."""

from __future__ import annotations

from flwr.simulation import run_simulation

from quickstart_capture.client_app import app as client_app
from quickstart_capture.server_app import NUM_CLIENTS
from quickstart_capture.server_app import app as server_app

if __name__ == "__main__":
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=NUM_CLIENTS,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
