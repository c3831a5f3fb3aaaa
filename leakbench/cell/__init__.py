"""The cell layer: what defines one cell of a suite (its axes, declared once in `leakbench.cell.axes`)."""
