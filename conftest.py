"""Fixtures shared by tests/ and benchmarks/ (pytest loads this file for both)."""

import pytest


@pytest.fixture
def one_torch_thread():
    """Run the test with one torch thread: tiny ops only gain contention from more on shared CI cores."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
