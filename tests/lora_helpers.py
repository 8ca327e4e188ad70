"""Test support shared by the adapter sync, parity and vLLM tests."""

import torch


def perturb_lora(policy, seed: int, scale: float = 0.5) -> None:
    """Make the adapter non-trivial: LoRA B starts at zero, so fill it with seeded noise."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * scale)


def tiny_lora_policy(model_path):
    """A LoRA (rank 4) policy on the tiny text LM at ``model_path``, in float32, as the sync tests use."""
    from algos.policies.lm import LoRAConfig, LoRALMPolicy

    return LoRALMPolicy.from_pretrained(model_path, lora=LoRAConfig(rank=4, alpha=8), dtype=torch.float32)
