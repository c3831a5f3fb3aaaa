"""The malicious server (issue 46): what a server that modifies the model it sends does, as plain data.

An honest-but-curious server attacks the update of the model the client really trains. A malicious server
sends a *modified* model first (Fowl et al.'s imprint block, Boenisch et al.'s trap weights), then attacks the
update the client computed on it. In leakbench such an attack is one registered attack with a
`modify` method (`leakbench.attacks.malicious.MaliciousAttack`): the harness runs `modify` in a sandboxed
worker of its own, which holds the public model and nothing else (never a batch, never a data location), and
takes back only a `ServerModel` — plain arrays within hard limits — from which it builds the modified victim
with its own code (`modified_victim`). The client then trains that victim exactly as it would the real one,
with the cell's defences; the attack worker gets the update as always.
"""

from leakbench.server.model import MAX_BLOCK, ModifiedVictim, ServerModel, modified_victim

__all__ = ["MAX_BLOCK", "ModifiedVictim", "ServerModel", "modified_victim"]
