"""Data parallelism across the threads of one process: an update's micro-batches on copies of the policy.

A tiny model's forward and backward are many small kernels: torch's own intra-op threads split
each kernel and wait at a barrier after it, which on a 2-core machine whose other core is busy is
slower than one thread (measured in ``benchmarks/profile_step.py``). Here each thread instead runs
whole micro-batches on its own copy of the policy (torch releases the GIL inside its kernels), the
copies' gradients are added to the policy's in a fixed order before the clip, and the optimizer
step's new weights are copied back into them. On a busy machine the threads simply share the core
that is free; the result is the same either way, bit for bit, because every part's arithmetic and
the order of the sums depend only on the number of threads.

Used as an :class:`algos.base.Strategy`: ``algorithm.strategy = ThreadReplicas(policy, 2)``; the SFT
stage runs its batches the same way through :class:`Replicas`.
"""

from __future__ import annotations

import copy
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import numpy as np
import torch

from algos.base import Algorithm, Strategy


def contiguous_parts(items: Sequence[Any], parts: int) -> list[list[Any]]:
    """``items`` cut into at most ``parts`` contiguous, near-equal, non-empty lists (a batch's share per thread)."""
    bounds = np.linspace(0, len(items), parts + 1).round().astype(int)
    return [list(items[a:b]) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


class Replicas:
    """``threads - 1`` copies of a module, each run on a thread of its own beside the caller's (the module itself).

    The pieces every thread-parallel training loop needs: :meth:`map` runs ``fn(copy, part)`` for each
    part (part ``i`` on copy ``i % threads``); :meth:`gather_gradients` adds the copies' gradients into
    the module's in a fixed order; :meth:`copy_weights` puts the module's weights back into the copies
    after an optimizer step. ``params_of(module)`` names the trained parameters, in the same order for
    the module and every copy.
    """

    def __init__(self, module: Any, threads: int, params_of: Callable[[Any], Sequence[torch.nn.Parameter]]):
        if threads < 2:
            raise ValueError(f"Replicas needs threads >= 2, got {threads}")
        self.threads = int(threads)
        self.module = module
        self.params_of = params_of
        self.copies = [copy.deepcopy(module) for _ in range(self.threads - 1)]
        self.pool = ThreadPoolExecutor(max_workers=self.threads - 1, thread_name_prefix="replica")

    def map(self, fn: Callable[[Any, Any], Any], parts: Sequence[Any]) -> list[Any]:
        """``[fn(copy_of(i), parts[i]) for i]`` with part ``i`` on copy ``i % threads`` (copy 0 is the module, in the
        calling thread); results in order."""
        modules = [self.module, *self.copies]
        grad_enabled = torch.is_grad_enabled()  # grad mode is per thread: the workers take the caller's

        def run(k: int) -> list[tuple[int, Any]]:
            with torch.set_grad_enabled(grad_enabled):
                return [(i, fn(modules[k], parts[i])) for i in range(k, len(parts), self.threads)]

        futures = [self.pool.submit(run, k) for k in range(1, self.threads)]
        try:
            results = dict(run(0))
        finally:
            done = [f.result() for f in futures]  # wait for every thread, even when this one failed
        for part in done:
            results.update(part)
        return [results[i] for i in range(len(parts))]

    @torch.no_grad()
    def gather_gradients(self) -> None:
        """Add the copies' gradients to the module's (copy 1, 2, ... in order) and clear theirs."""
        main = list(self.params_of(self.module))
        for replica in self.copies:
            for p, q in zip(main, self.params_of(replica)):
                if q.grad is None:
                    continue
                if p.grad is None:
                    p.grad = q.grad.clone()
                else:
                    p.grad.add_(q.grad)
                q.grad = None

    @torch.no_grad()
    def copy_weights(self) -> None:
        """Copy the module's trained weights into every copy (after an optimizer step or a checkpoint load)."""
        main = list(self.params_of(self.module))
        for replica in self.copies:
            theirs = list(self.params_of(replica))
            if len(theirs) != len(main):
                raise RuntimeError("a copy lost track of the module's trained parameters")
            for p, q in zip(main, theirs):
                q.copy_(p)
                q.grad = None


class ThreadReplicas(Strategy):
    """Run an update's micro-batches on ``threads`` copies of the policy, one thread each (see the module docstring)."""

    def __init__(self, policy: Any, threads: int):
        if threads < 2:
            raise ValueError(f"ThreadReplicas needs threads >= 2, got {threads} (the default Strategy is one thread)")
        self.threads = int(threads)
        self.copies = Replicas(policy, self.threads, lambda p: p.trainable_parameters())
        self.replicas = self.copies.copies

    def parts(self, rows: torch.Tensor, micro: int) -> list[torch.Tensor]:
        """Near-equal contiguous parts, at least one per thread and none larger than ``micro`` rows."""
        count = max(self.threads, math.ceil(len(rows) / max(micro, 1)))
        count = self.threads * math.ceil(count / self.threads)  # every thread gets as many parts
        return [part for part in torch.tensor_split(rows, count) if len(part)]

    def map_parts(self, algorithm: Algorithm, fn: Callable[[Any, Any], Any], parts: Sequence[Any]) -> list[Any]:
        """Part ``i`` on copy ``i % threads`` (copy 0 is the policy itself, in the calling thread); results in order."""
        return self.copies.map(fn, parts)

    def clip_gradients(self, algorithm: Algorithm) -> float:
        """Add the copies' gradients to the policy's (copy 1, 2, ... in order), then clip as one process would."""
        self.copies.gather_gradients()
        return super().clip_gradients(algorithm)

    def begin_update(self, algorithm: Algorithm) -> None:
        """Copy the policy's trainable weights into every copy (they may have been loaded from a checkpoint)."""
        self.copies.copy_weights()

    def after_step(self, algorithm: Algorithm) -> None:
        """Copy the optimizer step's new weights into every copy."""
        self.copies.copy_weights()
