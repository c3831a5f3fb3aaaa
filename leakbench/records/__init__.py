"""The record store: everything leakbench writes to and reads from disk about runs and cells.

`schema` (the record columns), `artifacts` (an attack's stored answer), `cells` (a cell folder,
written all or nothing), `seal` (what makes a cell folder intact), `folders` (only leakbench's own
folders are replaced), `atomic` (whole-file writes), `environment` (versions and machine), `runs`
(a run folder's cells and consolidated tables; `read_run` is how reports read a run) and `truth`
(a cell's re-derived ground truth beside its stored reconstruction). Importing this package loads
no attack and none of the harness runner.
"""
