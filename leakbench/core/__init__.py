"""The base layer: errors, value ranges and limits, settings coercion, the registry mechanism and the plain
types every layer shares. It imports nothing else from leakbench and holds no registry's contents
(docs/reference/layout.md#layers; `tests/test_imports.py`)."""
