"""leakbench: how much private training data leaks from federated-learning client updates."""

__version__ = "0.1.0"
