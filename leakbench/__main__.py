"""`python -m leakbench` = the `leakbench` console script."""

import sys

from leakbench.cli import main

sys.exit(main())
