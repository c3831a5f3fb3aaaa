"""The ClientApp: one SGD step on the client's batch per TRAIN message, wrapped in leakbench's capture mod.

`leakbench_capture` is the outermost mod (first in `mods`), so it stores what the server receives: the weights
this client was sent and the weights it sends back, under `captures/round-R/node-N/`. This example also hands
the mod the client's batch (`batch=`), which only a simulation you control can do, so that leakbench can score
what an attack recovers; leave it out and the attacks still run, unscored.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from leakbench.fl.capture import leakbench_capture
from quickstart_capture.task import client_batch, make_model, train_step

CAPTURE_DIR_ENV = "LEAKBENCH_CAPTURE_DIR"
"""Where `app` captures to (default ./captures)."""


def make_client_app(capture_dir: Path) -> ClientApp:
    """The ClientApp, capturing into `capture_dir`."""
    def batch(context: Context) -> tuple[torch.Tensor, torch.Tensor]:  # this client's batch, for scoring only
        return client_batch(int(context.node_config["partition-id"]))

    app = ClientApp(mods=[leakbench_capture(capture_dir, lr_key="lr", local_steps=1, batch=batch)])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        model = make_model()
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        images, labels = client_batch(int(context.node_config["partition-id"]))
        train_step(model, images, labels, float(msg.content["config"]["lr"]))
        content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                              "metrics": MetricRecord({"num-examples": len(labels)})})
        return Message(content=content, reply_to=msg)

    return app


app = make_client_app(Path(os.environ.get(CAPTURE_DIR_ENV, "captures")))
