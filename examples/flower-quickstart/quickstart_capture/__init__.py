"""A quickstart-style Flower app (PyTorch MLP, one FedSGD step per round) whose ClientApp captures its updates
for leakbench (`leakbench_capture`); see this folder's README.md."""
