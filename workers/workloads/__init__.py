"""Training workloads: the torch-free catalog (``catalog``) and the torch-side models, data and
training-job API (``models``, ``data``, ``training``; these import torch)."""
