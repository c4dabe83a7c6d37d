"""Torch runs these tests with one intra-op thread: on shared, loaded cores OpenMP synchronisation
between two threads costs milliseconds per operator and makes small-model tests many times slower."""
import pytest


@pytest.fixture(autouse=True)
def one_torch_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
