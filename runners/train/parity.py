"""Parity probe: after every sync, the generator must score a fixed sequence like the trainer does.

The silent failure this guards against: the trainer updates and publishes its adapter, but
the sampler keeps serving old weights (a missed load, a cached LoRA id, a wrong path), so
rollouts keep coming from the initial policy and training quietly goes nowhere.

:class:`ParityProbe` holds one fixed sequence (a maze prompt plus a fixed reply). After each
sync it asks the generator for teacher-forced log-probs of the reply (hf: a direct forward
pass; vLLM: ``prompt_logprobs`` over prompt + reply) and the trainer policy for its own.

Calibration. Two engines never agree exactly: a bf16 vLLM with LoRA kernels and an FSDP trainer
can differ by more than any fixed tolerance on a large model. :meth:`ParityProbe.calibrate`, run
when both sides hold the same weights (the start of a run, or a resume), measures that gap; later
checks allow the tolerance on top of it, and the generator's calibration log-probs stand for the
weights it served before the first sync.

A check raises :class:`StaleWeightsError` only on evidence that the generator does not serve the
published weights: a wrong version stamp, or log-probs beyond the allowed gap that lie closer to
the base model's or to what the generator gave at the previous check (or calibration) than to the
trainer's. A gap beyond the allowed one without that evidence is numerical drift: the check
returns it (``excess``, ``drift``) for the metrics and the run goes on.

Tolerances (mean |delta log-prob| per token): :data:`DEFAULT_TOLERANCE` (fp32) and
:data:`LOW_PRECISION_TOLERANCE` (bf16/fp16).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

DEFAULT_TOLERANCE = 1e-3
"""fp32 on both sides: kernels differ in summation order only."""
LOW_PRECISION_TOLERANCE = 5e-2
"""bf16/fp16 on either side: rounding noise of the logits dominates."""


EVIDENCE_RATIO = 2.0
"""Log-probs beyond the allowed gap count as stale weights when they are this many times closer to the previous
check's (or the base model's) than to the trainer's: engine noise alone does not pick one side that clearly."""


class StaleWeightsError(RuntimeError):
    """The generator does not sample from the weights the trainer just published."""


def tolerance_for(dtype: Any) -> float:
    """Default tolerance for a model dtype (``torch.float32`` / ``"bfloat16"`` / ...)."""
    name = str(dtype).replace("torch.", "")
    return DEFAULT_TOLERANCE if name in ("float32", "float", "float64", "auto") else LOW_PRECISION_TOLERANCE


def _mean_abs(a: Sequence[float], b: Sequence[float]) -> float:
    return float(np.mean(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))


def trainer_logprobs(
    policy: Any, prompt_ids: list[int], response_ids: list[int], images: list[Any], reference: bool = False
) -> list[float]:
    """Log-probs of the probe reply under a trainer ``Policy`` (``evaluate``), in eval mode, no grad.

    Scored at temperature 1, like ``Generator.score``, whatever temperature the policy trains at.
    """
    import torch

    from algos.data import Turn

    turn = Turn(prompt_ids=list(prompt_ids), response_ids=list(response_ids), images=list(images))
    model = getattr(policy, "model", None)
    was_training = bool(getattr(model, "training", False))
    temperature = getattr(policy, "temperature", None)
    if model is not None:
        model.eval()
    if temperature is not None:
        policy.temperature = 1.0
    try:
        with torch.no_grad():
            out = policy.score_turns([turn], reference=reference)
    finally:
        if model is not None and was_training:
            model.train()
        if temperature is not None:
            policy.temperature = temperature
    return out.logprobs[0, : len(response_ids)].float().tolist()


def default_probe_messages(size: int = 9, max_moves: int = 20) -> list[dict]:
    """A fixed text-mode maze conversation (maze drawn with seed 0) used as the probe prompt."""
    from mazegym.llm import build_messages, system_prompt, user_message
    from runners.rollout.env import make_env

    env = make_env(size, max_moves, "text")
    obs, info = env.reset(seed=0)
    return build_messages(system_prompt(size, max_moves, "text"), [], user_message(obs, info, obs_mode="text"))


@dataclass
class ParityProbe:
    """A fixed prompt + reply, checked against the trainer after every sync."""

    prompt_ids: list[int]
    """Probe context tokens."""
    response_ids: list[int]
    """Probe reply tokens (scored teacher-forced)."""
    images: list[Any] = field(default_factory=list)
    """Images for VLM probes (empty: text-only probe, which still exercises the LM adapter)."""
    tolerance: float = DEFAULT_TOLERANCE
    """Max allowed mean |generator - trainer| log-prob per reply token."""
    history: list[dict] = field(default_factory=list)
    """One record per check (and calibration): version, mean/max deltas, the generator's log-probs."""
    baseline: float = 0.0
    """The mean |generator - trainer| log-prob gap on identical weights, measured by :meth:`calibrate`."""

    @classmethod
    def from_encoder(
        cls, encoder: Any, reply: str = "I should go down.<action>down</action>", tolerance: float = DEFAULT_TOLERANCE
    ) -> "ParityProbe":
        """Build the default probe with a generator's :class:`ChatEncoder` (any tokenizer)."""
        prompt_ids, images = encoder.encode(default_probe_messages())
        tok = encoder.tokenizer
        response_ids = list(tok.encode(reply, add_special_tokens=False))
        if tok.eos_token_id is not None:
            response_ids.append(int(tok.eos_token_id))
        return cls(prompt_ids=prompt_ids, response_ids=response_ids, images=images, tolerance=tolerance)

    @classmethod
    def for_generator(cls, generator: Any, trainer_dtype: Any = "float32", **kwargs: Any) -> "ParityProbe":
        """The default probe with a tolerance fitting both sides' dtypes (the looser one wins)."""
        tolerance = max(tolerance_for(getattr(generator, "dtype", "float32")), tolerance_for(trainer_dtype))
        return cls.from_encoder(generator.encoder, tolerance=tolerance, **kwargs)

    def calibrate(
        self,
        generator: Any,
        policy: Any = None,
        trainer_fn: Callable[[list[int], list[int], list[Any]], list[float]] | None = None,
    ) -> dict:
        """Measure the generator/trainer gap while both hold the same weights: it becomes :attr:`baseline`, and
        the generator's log-probs the previous weights' for the first check. Returns ``{"version", "baseline"}``."""
        seen, expected = self._both_sides(generator, policy, trainer_fn)
        self.baseline = _mean_abs(seen, expected)
        self.history.append(
            {"version": generator.adapter_version, "mean_abs": self.baseline, "generator": seen, "calibration": True}
        )
        return {"version": generator.adapter_version, "baseline": self.baseline}

    def _both_sides(
        self, generator: Any, policy: Any, trainer_fn: Callable[..., list[float]] | None
    ) -> tuple[list[float], list[float]]:
        """The generator's and the trainer's log-probs of the probe reply."""
        if policy is None and trainer_fn is None:
            raise ValueError("the parity probe needs the trainer policy or a trainer_fn")
        seen = generator.score(self.prompt_ids, self.response_ids, self.images or None)
        if trainer_fn is not None:
            return seen, trainer_fn(self.prompt_ids, self.response_ids, self.images)
        return seen, trainer_logprobs(policy, self.prompt_ids, self.response_ids, self.images)

    def check(
        self,
        generator: Any,
        policy: Any = None,
        version: int | None = None,
        trainer_fn: Callable[[list[int], list[int], list[Any]], list[float]] | None = None,
        reference_fn: Callable[[list[int], list[int], list[Any]], list[float]] | None = None,
    ) -> dict:
        """Compare generator and trainer log-probs on the probe; raise StaleWeightsError on mismatch.

        The trainer side is ``policy.score_turns`` (or ``trainer_fn(prompt_ids, response_ids, images)``).
        ``reference_fn`` (same signature: the base model's log-probs) lets a failure report say
        "adapter never applied" without running ``policy`` again, e.g. when the policy is
        FSDP-sharded and every forward is a collective (runners.distributed.ray_runner computes both sides on
        every rank and passes them as functions).
        ``version`` is the adapter version just published; the generator must report it.
        Returns ``{"version", "mean_abs", "max_abs", "excess", "drift"}``: ``excess`` is the gap above the
        calibrated :attr:`baseline`, ``drift`` 1.0 when the gap passed the allowed one without evidence of
        stale weights (see the module docstring).
        """
        if policy is None and trainer_fn is None:
            raise ValueError("ParityProbe.check needs the trainer policy or a trainer_fn")
        if version is not None and generator.adapter_version != version:
            raise StaleWeightsError(
                f"parity probe: the trainer published adapter version {version} but the generator serves version "
                f"{generator.adapter_version}. Likely cause: the sync step did not call generator.load_adapter "
                f"(or AdapterSync.pull) after publishing."
            )
        seen, expected = self._both_sides(generator, policy, trainer_fn)
        mean_abs = _mean_abs(seen, expected)
        max_abs = float(np.max(np.abs(np.asarray(seen) - np.asarray(expected)))) if seen else 0.0
        drift = mean_abs > self.allowed_gap
        if drift:
            cause = self._stale_cause(seen, expected, policy, reference_fn)
            if cause is not None:
                raise StaleWeightsError(self._explain(seen, expected, mean_abs, generator.adapter_version, cause))
        record = {
            "version": generator.adapter_version,
            "mean_abs": mean_abs,
            "max_abs": max_abs,
            "excess": max(0.0, mean_abs - self.baseline),
            "drift": float(drift),
            "generator": list(seen),
        }
        self.history.append(record)
        return {k: record[k] for k in ("version", "mean_abs", "max_abs", "excess", "drift")}

    @property
    def allowed_gap(self) -> float:
        """The largest mean |generator - trainer| gap a check accepts: the calibrated baseline plus the tolerance."""
        return self.baseline + self.tolerance

    def _stale_cause(
        self,
        seen: list[float],
        expected: list[float],
        policy: Any,
        reference_fn: Callable[[list[int], list[int], list[Any]], list[float]] | None,
    ) -> str | None:
        """Why the generator evidently serves other weights than the trainer's (:data:`EVIDENCE_RATIO` times closer
        to the previous check's or the base model's log-probs than to the trainer's), or None when nothing says so."""
        to_trainer = _mean_abs(seen, expected)
        if self.history and EVIDENCE_RATIO * _mean_abs(seen, self.history[-1]["generator"]) < to_trainer:
            return (
                f"the generator gives what it gave at version {self.history[-1]['version']}: it still serves "
                "the previous adapter (skipped sync, a reused LoRA id or a cached adapter)"
            )
        base = None
        if reference_fn is not None:
            base = reference_fn(self.prompt_ids, self.response_ids, self.images)
        elif policy is not None and hasattr(policy, "model") and hasattr(policy.model, "disable_adapter"):
            base = trainer_logprobs(policy, self.prompt_ids, self.response_ids, self.images, reference=True)
        if base is not None and EVIDENCE_RATIO * _mean_abs(seen, base) < to_trainer:
            return "the generator matches the BASE model: the adapter was never applied (missing load / LoRA disabled)"
        return None

    def _explain(self, seen: list[float], expected: list[float], mean_abs: float, version: int, cause: str) -> str:
        """The failure report: the gap, the first log-probs of both sides and the likely cause."""
        lines = [
            f"parity probe failed at adapter version {version}: generator log-probs differ from the trainer's by "
            f"{mean_abs:.3g} per token on average (allowed {self.allowed_gap:.3g}: calibrated gap "
            f"{self.baseline:.3g} + tolerance {self.tolerance:g}).",
            f"  trainer expects (first tokens): {np.round(expected[:6], 4).tolist()}",
            f"  generator gives (first tokens): {np.round(seen[:6], 4).tolist()}",
            f"  likely cause: {cause}.",
        ]
        return "\n".join(lines)
