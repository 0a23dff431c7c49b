"""How a figure is measured and credited: timed calls and whole runs, where the baseline runs, what
the node delivered, the statistics, when to stop, which speedup earns points.
"""
