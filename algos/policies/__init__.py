"""Policies that implement :class:`algos.policy.Policy`.

- :class:`algos.policies.lm.LoRALMPolicy`: a Hugging Face causal LM / VLM with a LoRA adapter.
- :class:`algos.policies.net.MazeNetPolicy`: a small torch network with action and value heads.

Import the submodule you need (``from algos.policies.lm import LoRALMPolicy``); this package
does not import transformers eagerly.
"""
