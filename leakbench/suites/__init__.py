"""The shipped suite files (package data): NAME.toml for `leakbench run NAME`, paper/NAME.toml for
`leakbench reproduce NAME`. Read with importlib.resources (leakbench.harness.suite), so they work from
an installed wheel as from a checkout."""
