"""Nodes, devices and placements (the cluster as the scheduler sees it)."""
