"""The server's threat model as records name it (issue 46): honest-but-curious, or malicious.

A malicious server's attack (`attacks.malicious.MaliciousAttack`) modifies the model it sends; its cells carry the
record column `SERVER_COLUMN` = MALICIOUS. An honest server's cells carry no such column (every record stored
before issue 46 stays as it was), which reports read as HONEST.
"""

HONEST, MALICIOUS = "honest", "malicious"
"""The two server threat models."""
SERVER_COLUMN = "server"
"""The record column that names a malicious server (absent for an honest one)."""
