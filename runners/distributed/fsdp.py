"""FSDP2 for the Ray runner's training ranks: shard the LoRA policy, keep ranks in lockstep, gather the adapter.

Every Ray worker (:class:`runners.distributed.ray_runner.RolloutTrainWorker`) is one FSDP2 rank. The policy
(:class:`algos.policies.lm.LoRALMPolicy`, a Hugging Face model with a PEFT LoRA adapter) is
sharded with ``torch.distributed.fsdp.fully_shard``: one FSDP unit per decoder layer of the
language model, then the root (which keeps the embeddings, the output head and, for a VLM, the
vision tower). Frozen base weights, LoRA weights, LoRA gradients and the AdamW state are all
sharded; the same code runs with gloo on CPUs and NCCL on GPUs. Functions:

* :func:`shard_policy` shards the model (call it before the optimizer is built: it replaces the
  parameters with DTensors) and returns it as a :class:`ShardedLoRALMPolicy` (shard-aware
  ``load_adapter``, refused ``save_adapter``, a lockstep round before each forward);
* :func:`gather_adapter` / :func:`save_full_adapter` / :func:`load_full_adapter`: the full
  adapter in PEFT format (what the sync dir and checkpoints hold, valid for any worker count);
* :func:`gather_algorithm_state` / :func:`shard_optimizer_state`: the optimizer state in the
  local runner's (unsharded) checkpoint format, and back into shards after loading;
* :class:`Lockstep`: every rank runs the same sequence of collectives in one update; it is the
  algorithm's :class:`algos.base.Strategy` and the sharded policy's ``lockstep``.

Lockstep. FSDP2 all-gathers parameters in every forward and reduce-scatters gradients in every
backward, so every rank must run the same passes in the same order, but ranks update on their
own episodes: different numbers of turns, hence of scoring forwards, micro-batches and
optimizer steps, and zero-variance filtering can leave a rank with nothing at all. The
algorithm's update loop (:meth:`algos.base.Algorithm.update`) is the local runner's; it reaches
the :class:`Lockstep` through two explicit seams, one per place a collective unit starts:
:meth:`ShardedLoRALMPolicy._forward` calls :meth:`Lockstep.before_forward` (S and M units), and
``Algorithm.clip_gradients`` calls its strategy's ``clip_gradients`` (:meth:`Lockstep.clip_gradients`,
the C unit). The three kinds of unit:

====  ====================================================  ========================================
unit  where                                                 padding pass
====  ====================================================  ========================================
S     a no-grad forward (old / reference log-probs)         a no-grad forward of a 2-token dummy
M     a forward with grad (its backward follows)            forward + backward of a dummy, loss x 0
C     ``Algorithm.clip_gradients`` (+ the optimizer step)   clip + optimizer step + zero_grad
====  ====================================================  ========================================

Before each unit a rank takes part in one *round*: an all-reduce of one-hot "what I do next"
codes (S < M < C < done). The round runs the smallest pending kind; ranks waiting for a
later kind, or already done with their update, run the padding pass of that kind and ask
again. So a rank still scoring holds the others' training back, and an optimizer step (C)
runs only once every rank has finished the micro-batches of that step (or the whole update),
so step *j* of every rank is the same global optimizer step. After its local update a rank
serves rounds until every rank is done (:meth:`Lockstep.finish`). Overhead: one tiny
all-reduce per unit. With several ranks a micro-batch is one forward (see
:meth:`ShardedLoRALMPolicy.score_turns`).

Gradient semantics. Reduce-scatter *sums* (gradient divide factor 1); at each global step
*j* the summed shard gradients are divided by ``n_j``, the number of ranks that had data for
step *j* (padding passes contribute exact zeros: loss x 0). The step's gradient is therefore
the mean over the ranks that trained in it of their own minibatch gradients (each normalised
over its own minibatch, as on the local runner), then clipped to ``max_grad_norm`` by its
global norm, then one AdamW step on every shard. With one rank this is the local runner's
update exactly. A rank with nothing to train on still
takes every optimizer step (its shards are part of the model) and advances its learning-rate
schedule with the others.

Non-collective paths. Outside an update a forward is still collective, so anything that runs
the trainer policy (the parity probe) must run on every rank; the Ray worker does that.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

from algos.base import Strategy
from algos.policies.lm import LoRALMPolicy

S, M, C, DONE = 0, 1, 2, 3
"""Round codes, in the order rounds serve them: no-grad forward, forward+backward, clip+step, done."""
UNIT_NAMES = ("S", "M", "C", "done")


# ------------------------------------------------------------------------------ sharding
def device_mesh(device_type: str = "cpu") -> Any:
    """A 1-D device mesh over every rank of the default process group (FSDP's data-parallel mesh)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device_type, (dist.get_world_size(),), mesh_dim_names=("fsdp",))


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The language model's decoder layers: one FSDP unit each.

    Found by class name in the Hugging Face model's ``_no_split_modules`` (e.g.
    ``Qwen2DecoderLayer``); vision-tower blocks are left to the root unit, so a padding pass
    without images all-gathers exactly what a real pass with images does.
    """
    from algos.policies.lm import VISION_MODULE_PATTERN

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(base, "_no_split_modules", None) or [])
    vision = re.compile(VISION_MODULE_PATTERN)
    return [
        module
        for name, module in model.named_modules()
        if type(module).__name__ in names and not vision.fullmatch(name)
    ]


def fsdp_modules(model: nn.Module) -> list[Any]:
    """Every module of ``model`` that :func:`fully_shard` turned into an FSDP unit."""
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def is_sharded(policy: Any) -> bool:
    """True when :func:`shard_policy` sharded this policy's model."""
    return isinstance(policy, ShardedLoRALMPolicy)


def shard_policy(policy: Any, mesh: Any = None, mp_policy: Any = None) -> "ShardedLoRALMPolicy":
    """Shard ``policy.model`` with FSDP2 (one ``fully_shard`` per decoder layer, then the root); returns the
    :class:`ShardedLoRALMPolicy` over that model, which replaces ``policy`` (same state).

    Call on every rank, after the LoRA init (identical on every rank) and *before* building the
    optimizer: sharding replaces the parameters with DTensors. Gradients are reduce-scattered
    as sums (the :class:`Lockstep` divides them by the number of ranks with data).
    ``mp_policy``: an optional ``MixedPrecisionPolicy`` (None keeps the model's own dtypes,
    i.e. the local runner's numerics).
    """
    from torch.distributed.fsdp import fully_shard

    if is_sharded(policy):
        return policy
    if mesh is None:
        mesh = device_mesh(policy.device.type)
    kwargs = {"mesh": mesh}
    if mp_policy is not None:
        kwargs["mp_policy"] = mp_policy
    # fully_shard cannot shard 0-d parameters (e.g. MazeVLM's saliency temperature, CLIP's logit scale):
    # they stay whole on every rank and the lockstep all-reduces their gradients.
    replicated = [p for p in policy.model.parameters() if p.ndim == 0]
    if replicated:
        kwargs["ignored_params"] = set(replicated)
    # The decoder layers' reduce-scatters must come in the same order on every rank. A layer's runs as soon
    # as the gradient reaches its inputs when they require grad, else in the final callback: a real pass
    # whose inputs carry a trained vision encoder's features and a padding pass without images would
    # disagree. Input embeddings that always require grad (transformers' own switch) make both the former.
    base = policy.model.get_base_model() if hasattr(policy.model, "get_base_model") else policy.model
    if hasattr(base, "enable_input_require_grads"):
        base.enable_input_require_grads()
    for layer in decoder_layers(policy.model):
        fully_shard(layer, **kwargs)
    fully_shard(policy.model, **kwargs)
    units = fsdp_modules(policy.model)
    for module in units:
        module.set_gradient_divide_factor(1.0)
        module.set_force_sum_reduction_for_comms(True)  # plain SUM: gloo has no AVG / PREMUL_SUM
    reduce_unused_gradients(units, policy.model, mesh.size())
    return ShardedLoRALMPolicy(policy, mesh, replicated)


def trains_parameters_a_pass_may_skip(model: nn.Module) -> bool:
    """True when a trainable parameter can get no gradient from one rank's pass while another's gives it one:
    anything trained besides the language model's LoRA weights, which every pass uses (the vision side, which a
    text-only pass leaves unused, ``lora.modules_to_save``, a PPO critic that a padding pass does not reach)."""
    from algos.policies.lm import VISION_MODULE_PATTERN

    vision = re.compile(VISION_MODULE_PATTERN)
    return any(
        p.requires_grad and (".lora_" not in name or vision.fullmatch(name)) for name, p in model.named_parameters()
    )


def reduce_unused_gradients(units: list[Any], model: nn.Module, ranks: int) -> None:
    """Make the FSDP ``units`` reduce-scatter zeros for parameters a pass left unused, where that matters: several
    ``ranks`` and :func:`trains_parameters_a_pass_may_skip`. A torch without the switch is refused only then."""
    if ranks < 2 or not trains_parameters_a_pass_may_skip(model):
        return  # every pass gives every trainable parameter a gradient: the ranks' reduce-scatters agree
    for module in units:
        if not hasattr(module, "set_reduce_scatter_unused_params"):
            raise RuntimeError(
                f"torch {torch.__version__} has no FSDPModule.set_reduce_scatter_unused_params, which {ranks} ranks "
                "need when the vision tower, lora.modules_to_save or a critic train (a rank's pass may leave them "
                "without gradients); use a torch that has it, train the language model's LoRA only, or run one worker"
            )
        module.set_reduce_scatter_unused_params(True, recurse=False)


class ShardedLoRALMPolicy(LoRALMPolicy):
    """A :class:`~algos.policies.lm.LoRALMPolicy` whose model is FSDP2-sharded (built by :func:`shard_policy`).

    Differences from the unsharded policy: every forward first takes part in its
    :class:`Lockstep`'s round (when one is running an update), a forward with grad on several
    ranks covers all its turns (see :meth:`evaluate`), ``load_adapter`` loads a full PEFT adapter
    into the shards, and saving the adapter fails loudly (it needs the collective
    :func:`gather_adapter`, then :func:`save_full_adapter` on one rank).
    """

    def __init__(self, policy: LoRALMPolicy, mesh: Any, replicated: list[nn.Parameter] | None = None):
        """Take over ``policy``'s state (its model already sharded on ``mesh``); ``policy`` is not used again."""
        self.__dict__.update(vars(policy))
        self.fsdp_mesh = mesh
        self.replicated_params = list(replicated or [])
        """Parameters FSDP left whole on every rank (0-d ones); their gradients are all-reduced by the lockstep."""
        self.lockstep: Lockstep | None = None
        """The lockstep that runs this rank's updates; set by :class:`Lockstep`."""

    def score_turns(self, turns: Any, *, reference: bool = False) -> Any:
        """``LoRALMPolicy.score_turns``; with grad under a lockstep of several ranks, one forward for all ``turns``.

        An M unit is one forward and its backward: several forwards before one backward would
        let autograd interleave their reduce-scatters differently on different ranks. (The
        unsharded policy splits a micro-batch above ``score_chunk`` turns into several
        forwards; the results differ by float rounding only. One rank keeps the split, so one
        worker is the local runner bit for bit.)
        """
        lockstep = self.lockstep
        if not torch.is_grad_enabled() or reference or lockstep is None or lockstep.world_size == 1:
            return super().score_turns(turns, reference=reference)
        saved = self.score_chunk
        self.score_chunk = max(saved, len(turns))
        try:
            return super().score_turns(turns, reference=reference)
        finally:
            self.score_chunk = saved

    def _forward(self, turns: Any, length: int, **kwargs: Any) -> Any:
        if self.lockstep is not None:
            self.lockstep.before_forward()
        return self.local_forward(turns, length, **kwargs)

    def local_forward(self, turns: Any, length: int, **kwargs: Any) -> Any:
        """One forward pass without a lockstep round (the lockstep's own padding passes)."""
        return super()._forward(turns, length, **kwargs)

    def load_adapter(self, directory: str | Path, *, critic_optional: bool = False) -> None:
        """Load a full PEFT adapter into the shards (:func:`load_full_adapter`). Collective: every rank."""
        load_full_adapter(self, directory, critic_optional=critic_optional)

    def save_adapter(self, directory: str | Path) -> Path:
        """Refused: saving needs the collective :func:`gather_adapter` first."""
        raise _unsaveable()

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """Refused: the adapter is sharded (:func:`gather_adapter` collects it)."""
        raise _unsaveable()


def _unsaveable() -> RuntimeError:
    return RuntimeError(
        "the policy is FSDP-sharded: gather the adapter on every rank (runners.distributed.fsdp.gather_adapter), "
        "then write it on one (runners.distributed.fsdp.save_full_adapter)"
    )


# ------------------------------------------------------------------------------ adapter I/O
def gather_adapter(policy: Any, rank0_only: bool = True) -> dict[str, torch.Tensor]:
    """The full trainable (LoRA) weights, keyed by parameter name, on CPU. Collective: call on every rank.

    Only the trainable parameters are all-gathered, never the frozen base model (nor a tied
    output head). ``rank0_only``: the other ranks get an empty dict (rank 0 writes).
    """
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    keep = not rank0_only or not dist.is_initialized() or dist.get_rank() == 0
    out = {}
    for name, p in policy.model.named_parameters():
        if p.requires_grad:
            full = p.full_tensor() if isinstance(p, DTensor) else p
            if keep:
                out[name] = full.detach().cpu().clone()
    return out


def _is_critic(name: str) -> bool:
    """True for a parameter of the policy's value head (saved beside the adapter, not in it)."""
    from algos.policies.lm import VALUE_HEAD_MODULE

    return name.startswith(VALUE_HEAD_MODULE + ".")


def save_full_adapter(policy: Any, state: dict[str, torch.Tensor], directory: str | Path) -> Path:
    """Write a gathered adapter (:func:`gather_adapter`) in PEFT format, like ``LoRALMPolicy.save_adapter``
    (the value head, when gathered, to ``value_head.safetensors`` beside it)."""
    from algos.policies.lm import VALUE_HEAD_MODULE, save_value_head

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    lora = {k: v for k, v in state.items() if not _is_critic(k)}
    policy.model.save_pretrained(str(directory), safe_serialization=True, state_dict=lora)
    critic = {k[len(VALUE_HEAD_MODULE) + 1 :]: v for k, v in state.items() if _is_critic(k)}
    if critic:
        save_value_head(critic, directory)
    return directory


def peft_key_map(policy: Any) -> dict[str, str]:
    """PEFT adapter-file key -> model parameter name, for every trainable parameter (PEFT's own renaming)."""
    import peft

    names = [n for n, p in policy.model.named_parameters() if p.requires_grad and not _is_critic(n)]
    markers = {n: torch.empty(0) for n in names}
    by_id = {id(t): n for n, t in markers.items()}
    peft_state = peft.get_peft_model_state_dict(policy.model, state_dict=markers, save_embedding_layers=False)
    mapping = {key: by_id[id(t)] for key, t in peft_state.items() if id(t) in by_id}
    if sorted(mapping.values()) != sorted(names):
        raise RuntimeError(f"could not map the adapter's PEFT keys to the model's {len(names)} trainable parameters")
    return mapping


def load_full_adapter(policy: Any, directory: str | Path, *, critic_optional: bool = False) -> None:
    """Load a PEFT adapter directory into a sharded policy (every rank reads the full file, keeps its shard).

    Collective-safe: call on every rank. The adapter must have been written for the same model
    and LoRA rank, and carry the critic when the policy has one (the unsharded
    ``LoRALMPolicy.load_adapter`` rules).
    """
    from algos.policies.lm import VALUE_HEAD_FILE, VALUE_HEAD_MODULE, load_value_head

    from safetensors.torch import load_file
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    directory = Path(directory)
    weights = directory / "adapter_model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"no adapter_model.safetensors in {directory}")
    saved = json.loads((directory / "adapter_config.json").read_text())
    rank = int(policy.model.peft_config["default"].r)
    if int(saved.get("r", -1)) != rank:
        raise ValueError(f"adapter in {directory} has rank {saved.get('r')}, this policy rank {rank}")
    mapping = peft_key_map(policy)
    loaded = load_file(str(weights))
    unexpected = sorted(set(loaded) - set(mapping))
    missing = sorted(set(mapping) - set(loaded))
    if unexpected or missing:
        raise ValueError(
            f"adapter in {directory} does not fit this model: unexpected keys {unexpected[:5]}, missing {missing[:5]}"
        )
    state = {mapping[k]: v for k, v in loaded.items()}
    if getattr(policy, "has_value_head", False):
        head = getattr(policy.model, VALUE_HEAD_MODULE)
        critic = load_value_head(directory, {k: v.shape for k, v in head.state_dict().items()})
        if critic is None and not critic_optional:
            raise ValueError(
                f"no {VALUE_HEAD_FILE} in {directory}: this policy trains a critic (ppo) and the "
                "adapter was saved without one, so resuming would restart the critic from scratch"
            )
        state.update({f"{VALUE_HEAD_MODULE}.{k}": v for k, v in (critic or {}).items()})
    set_model_state_dict(policy.model, state, options=StateDictOptions(full_state_dict=True, strict=False))


class GatheredAdapter:
    """A gathered adapter that writes like a policy (``save_adapter``), for AdapterSync and checkpoints."""

    def __init__(self, policy: Any, state: dict[str, torch.Tensor]):
        self.policy = policy
        self.state = state

    def save_adapter(self, directory: str | Path) -> Path:
        """Write the adapter in PEFT format (see :func:`save_full_adapter`)."""
        return save_full_adapter(self.policy, self.state, directory)


class GatheredAlgorithmState:
    """Gathered algorithm state that checkpoints like an algorithm (``state_dict``)."""

    def __init__(self, state: dict[str, Any]):
        self.state = state

    def state_dict(self) -> dict[str, Any]:
        """The gathered state (the local runner's format)."""
        return self.state


# ------------------------------------------------------------------------------ optimizer state
def _full(value: Any) -> Any:
    from torch.distributed.tensor import DTensor

    return value.full_tensor().detach().cpu() if isinstance(value, DTensor) else value


def gather_algorithm_state(algorithm: Any) -> dict[str, Any]:
    """``algorithm.state_dict()`` with every sharded optimizer tensor gathered in full, on CPU.

    The result has the local runner's format (``torch.optim`` state keyed by parameter index), so
    a checkpoint resumes on any number of ranks, or on the local runner. Collective: every rank.
    """
    state = dict(algorithm.state_dict())
    opt = state["optimizer"]
    full = {idx: {k: _full(v) for k, v in opt["state"][idx].items()} for idx in sorted(opt["state"])}
    state["optimizer"] = {**opt, "state": full}
    return state


def shard_optimizer_state(optimizer: torch.optim.Optimizer) -> int:
    """After ``optimizer.load_state_dict`` of a full (gathered or local) state: keep only this rank's shards.

    Every state tensor with its parameter's full shape becomes a DTensor laid out like the
    parameter (each rank cuts its own shard; no communication). Returns the tensors converted.
    """
    from torch.distributed.tensor import DTensor, distribute_tensor

    converted = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            if not isinstance(p, DTensor) or p not in optimizer.state:
                continue
            state = optimizer.state[p]
            for key, value in list(state.items()):
                if torch.is_tensor(value) and not isinstance(value, DTensor) and tuple(value.shape) == tuple(p.shape):
                    state[key] = distribute_tensor(value.to(p.device), p.device_mesh, p.placements, src_data_rank=None)
                    converted += 1
    return converted


# ------------------------------------------------------------------------------ lockstep
class Lockstep(Strategy):
    """Keeps FSDP ranks in lockstep through :meth:`Algorithm.update` (see the module docstring).

    One rank's :class:`~algos.base.Strategy`: it becomes ``algorithm.strategy`` (its
    :meth:`clip_gradients` is the C unit) and ``policy.lockstep`` (each forward of the
    :class:`ShardedLoRALMPolicy` is an S or M unit). Rounds run only inside :meth:`update`,
    which every rank must enter once per training step::

        with lockstep.update():
            metrics = algorithm.update(my_episodes)
    """

    def __init__(self, policy: ShardedLoRALMPolicy, algorithm: Any, group: Any = None):
        import torch.distributed as dist

        if not isinstance(policy, ShardedLoRALMPolicy):
            raise TypeError(
                f"Lockstep needs a policy sharded by runners.distributed.fsdp.shard_policy, got {type(policy).__name__}"
            )
        if not hasattr(algorithm, "strategy"):
            raise TypeError("the algorithm has no strategy (algos.base.Algorithm provides it)")
        self.policy = policy
        self.algorithm = algorithm
        self.group = group
        self.world_size = dist.get_world_size(group)
        # NCCL reduces only GPU tensors; gloo only CPU ones.
        self.vote_device = policy.device if dist.get_backend(group) == "nccl" else torch.device("cpu")
        self.active = False
        self.padding = {name: 0 for name in UNIT_NAMES[:3]}
        self._real_steps = 0
        self._padded_steps = 0
        policy.lockstep = self
        algorithm.strategy = self

    # ------------------------------------------------------------ units
    def before_forward(self) -> None:
        """Called by the policy before each forward: during an update, a round for an M (grad) or S unit."""
        if self.active:
            self._run_until(M if torch.is_grad_enabled() else S)

    def clip_gradients(self, algorithm: Any) -> float:
        """The C unit: a round, then the mean over the ranks with data and global-norm clipping."""
        n_active = self._run_until(C) if self.active else 1
        self._real_steps += 1
        return self._clip_sharded(n_active)

    # ------------------------------------------------------------ rounds
    @contextlib.contextmanager
    def update(self) -> Iterator["Lockstep"]:
        """Rounds on for one update; on a normal exit, serve padding until every rank is done."""
        self.active = True
        self.padding = {name: 0 for name in UNIT_NAMES[:3]}
        self._real_steps = self._padded_steps = 0
        try:
            yield self
            self.finish()
        finally:
            self.active = False

    def finish(self) -> dict[str, int]:
        """Serve padding passes until every rank has finished its update; returns the padding done per unit."""
        self.algorithm.optimizer.zero_grad(set_to_none=True)
        self._run_until(DONE)
        if self._real_steps == 0 and self._padded_steps > 0:
            # No local data, but the other ranks trained: this rank took their optimizer steps,
            # so its learning-rate schedule advances with theirs.
            self.algorithm.scheduler.step()
            self.algorithm.num_updates += 1
        return dict(self.padding)

    def _round(self, unit: int) -> list[int]:
        """One all-reduce: how many ranks want each unit next."""
        import torch.distributed as dist

        votes = torch.zeros(4, dtype=torch.int64, device=self.vote_device)
        votes[unit] = 1
        if self.world_size > 1:
            dist.all_reduce(votes, group=self.group)
        return votes.tolist()

    def _run_until(self, unit: int) -> int:
        """Pad until a round runs ``unit``; returns how many ranks run it for real (C: ranks with data)."""
        while True:
            votes = self._round(unit)
            chosen = next(i for i, n in enumerate(votes) if n > 0)
            if chosen == unit:
                return votes[unit]
            self._pad(chosen, votes[chosen])

    def _dummy(self) -> Any:
        from algos.data import Turn

        pad = int(self.policy.pad_token_id)
        return [Turn(prompt_ids=[pad], response_ids=[pad])]

    def _pad(self, unit: int, n_active: int) -> None:
        """One padding pass of kind ``unit`` (its gradients are exactly zero)."""
        if unit == S:
            with torch.no_grad():
                self.policy.local_forward(self._dummy(), 1)
        elif unit == M:
            with torch.enable_grad():
                logprobs = self.policy.local_forward(self._dummy(), 1)[0]
                (logprobs.sum() * 0.0).backward()
        elif unit == C:
            # Only a rank that is done with its update gets here: take the others' step.
            self._clip_sharded(n_active)
            self.algorithm.optimizer.step()
            self.algorithm.optimizer.zero_grad(set_to_none=True)
            self._padded_steps += 1
        self.padding[UNIT_NAMES[unit]] += 1

    def _clip_sharded(self, n_active: int) -> float:
        """Mean over the ``n_active`` ranks with data (grads were summed), then clip by the global norm."""
        from torch.distributed.tensor import DTensor

        params = [p for g in self.algorithm.optimizer.param_groups for p in g["params"]]
        replicated = self.policy.replicated_params
        if replicated and self.world_size > 1:
            self._sum_replicated_grads(replicated)
        if n_active > 1:
            with torch.no_grad():
                for p in params:
                    if p.grad is not None:
                        p.grad.div_(n_active)
        c = self.algorithm.config.max_grad_norm
        if not replicated:
            norm = torch.nn.utils.clip_grad_norm_(params, c if c > 0 else math.inf)
            return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)
        # Sharded (DTensor) and whole gradients cannot share one clip_grad_norm_ call; this is its arithmetic
        # (per-tensor norms in parameter order, their norm, one clamped coefficient), so one rank still
        # computes what the local runner does.
        grads = [p.grad for p in params if p.grad is not None]
        norms = [torch.linalg.vector_norm(g, 2.0) for g in grads]
        norms = [n.full_tensor() if isinstance(n, DTensor) else n for n in norms]
        total = torch.linalg.vector_norm(torch.stack(norms), 2.0) if norms else torch.tensor(0.0)
        coef = torch.clamp((c if c > 0 else math.inf) / (total + 1e-6), max=1.0).item()
        with torch.no_grad():
            for g in grads:
                g.mul_(coef)
        return float(total)

    def _sum_replicated_grads(self, replicated: list[nn.Parameter]) -> None:
        """Sum the whole parameters' gradients over the ranks (all ranks, every C unit, in the same order);
        a parameter no rank has a gradient for keeps none, as on one rank."""
        import torch.distributed as dist

        with torch.no_grad():
            for p in replicated:
                has = torch.tensor([0.0 if p.grad is None else 1.0], device=p.device)
                grad = torch.zeros_like(p) if p.grad is None else p.grad
                both = torch.cat([grad.reshape(1), has])
                dist.all_reduce(both)
                p.grad = None if both[1].item() == 0 else both[0].reshape(p.shape).clone()
