"""An example leakbench plugin. Importing `leakbench_example_plugin.attack` registers `mean-image`."""

__version__ = "0.1.0"
