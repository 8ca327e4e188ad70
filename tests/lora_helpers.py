"""Test support shared by the adapter sync, parity and vLLM tests."""

import torch


def perturb_lora(policy, seed: int, scale: float = 0.5) -> None:
    """Make the adapter non-trivial: LoRA B starts at zero, so fill it with seeded noise."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * scale)
