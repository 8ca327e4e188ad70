"""A short, fixed measurement of the machine, recorded with every run: tells a slow machine from a regression.

The workload is the default model's kind of arithmetic (a weight-tied 3x3 conv block iterated over
a 9x9 grid, forward and backward) on one thread, so its rate moves with the RL step time the
same way across machines. It draws from its own random generator: a run's results do not depend
on whether, or how long, it calibrated.
"""

from __future__ import annotations

import os
import time
from typing import Any

CALIBRATION_UNIT = "forward+backward of a 20-iteration 3x3 conv block (32 channels, 9x9 grid, batch 64), one thread"
"""What one calibration unit is."""


def calibrate(seconds: float = 1.0) -> dict[str, Any]:
    """Units per second of :data:`CALIBRATION_UNIT` (best of 1-``seconds`` blocks), plus load and core count."""
    import torch

    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 32, 9, 9, generator=g)
        w1 = (torch.randn(32, 64, 3, 3, generator=g) * 0.05).requires_grad_()
        w2 = (torch.randn(32, 32, 3, 3, generator=g) * 0.05).requires_grad_()

        def unit() -> None:
            state = torch.zeros_like(x)
            for _ in range(20):
                update = torch.relu(torch.nn.functional.conv2d(torch.cat([state, x], 1), w1, padding=1))
                state = torch.relu(state + torch.nn.functional.conv2d(update, w2, padding=1))
            state.sum().backward()

        unit()  # warm-up (allocator, kernels)
        best, spent = 0.0, 0.0
        while spent < seconds:
            t0 = time.perf_counter()
            count = 0
            while time.perf_counter() - t0 < 0.25:
                unit()
                count += 1
            block = time.perf_counter() - t0
            best, spent = max(best, count / block), spent + block
    finally:
        torch.set_num_threads(threads)
    return {
        "units_per_s": round(best, 2),
        "unit": CALIBRATION_UNIT,
        "seconds": round(spent, 2),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(load_before, 2) if load_before is not None else None,
    }
