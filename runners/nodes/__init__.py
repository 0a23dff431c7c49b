"""Nodes and clusters: what this runner's hardware offers, and where a run's ranks go (one node,
stand-in nodes joined by an overlay, a SLURM allocation).
"""
