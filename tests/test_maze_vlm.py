"""MazeVLM: Auto-class loading, the processor's token count, batching, generation, LoRA round trips, SFT learning."""

import numpy as np
import pytest
import torch

import algos.models  # noqa: F401  (registers MazeVLM)
from algos.models.maze_vlm import (
    RecurrentConvEncoder,
    MazeVLMForConditionalGeneration,
    MazeVLMImageProcessor,
    set_vision_grad_iteration_range,
    set_vision_grad_iterations,
    set_vision_iterations,
)
from mazegym.render import render_frame
from mazegym.evalsets import load_eval_set
from model_helpers import TINY_DECODER, tiny_maze_vlm


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_maze_vlm(tmp_path_factory.mktemp("models") / "maze_vlm")


def frame(spec, cell=None):
    return render_frame(spec.grid, cell or spec.start, spec.goal)


def inputs_for(model_dir, images):
    """Prompt ids with the right number of image placeholders, plus pixel inputs."""
    from transformers import AutoConfig, AutoImageProcessor

    config = AutoConfig.from_pretrained(model_dir)
    processor = AutoImageProcessor.from_pretrained(model_dir)
    ids = []
    for image in images:
        n = processor.get_number_of_image_patches(image.shape[0], image.shape[1], {})
        ids.append([1] + [config.image_token_id] * n + [2])
    width = max(len(r) for r in ids)
    assert all(len(r) == width for r in ids), "test helper: same-size images only"
    pixels = processor(images=images, return_tensors="pt")
    return torch.tensor(ids), pixels


def test_auto_classes_load_it_by_path(model_dir):
    from transformers import AutoConfig, AutoImageProcessor, AutoModelForImageTextToText, AutoTokenizer

    config = AutoConfig.from_pretrained(model_dir)
    assert config.model_type == "mazegym_maze_vlm" and config.vision_config["iterations"] == 4
    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    assert isinstance(model, MazeVLMForConditionalGeneration)
    assert isinstance(AutoImageProcessor.from_pretrained(model_dir), MazeVLMImageProcessor)
    assert AutoTokenizer.from_pretrained(model_dir).chat_template
    # The VLM shape: vision encoder -> projector -> language model.
    assert {"vision_tower", "multi_modal_projector", "model", "lm_head"} <= {n for n, _ in model.named_children()}


def test_processor_gives_one_token_per_cell():
    processor = MazeVLMImageProcessor(cell_px=25, patch_px=5)
    assert processor.get_number_of_image_patches(225, 225, {}) == 81
    assert processor.get_number_of_image_patches(275, 275, {}) == 121
    out = processor(images=[np.zeros((225, 225, 3), np.uint8), np.zeros((275, 275, 3), np.uint8)], return_tensors="pt")
    assert out["pixel_values"].shape == (81 + 121, 75)
    assert out["image_grid_thw"].tolist() == [[1, 9, 9], [1, 11, 11]]
    with pytest.raises(ValueError, match="whole number"):
        processor(images=[np.zeros((210, 225, 3), np.uint8)])


def test_mixed_maze_sizes_in_one_batch_equal_separate_forwards(model_dir):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    small = frame(load_eval_set("VisMaze-v0")[0])
    large = frame(load_eval_set("VisMaze-Hard-v0")[0])
    ids_s, pix_s = inputs_for(model_dir, [small])
    ids_l, pix_l = inputs_for(model_dir, [large])
    with torch.no_grad():
        alone_s = model(input_ids=ids_s, **pix_s).logits[0, -1]
        alone_l = model(input_ids=ids_l, **pix_l).logits[0, -1]
        # One batch, right-padded: image tokens of both images in order.
        pad = ids_l.shape[1] - ids_s.shape[1]
        ids = torch.cat([torch.cat([ids_s, torch.zeros(1, pad, dtype=torch.long)], 1), ids_l])
        mask = torch.ones_like(ids)
        mask[0, ids_s.shape[1] :] = 0
        processor = MazeVLMImageProcessor()
        both = model(input_ids=ids, attention_mask=mask, **processor(images=[small, large], return_tensors="pt")).logits
    torch.testing.assert_close(both[0, ids_s.shape[1] - 1], alone_s, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(both[1, -1], alone_l, atol=1e-5, rtol=1e-5)


def test_vision_iterations_can_be_raised_at_inference(model_dir):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    ids, pix = inputs_for(model_dir, [frame(load_eval_set("VisMaze-v0")[0])])
    with torch.no_grad():
        before = model(input_ids=ids, **pix).logits
        set_vision_iterations(model, 9)
        after = model(input_ids=ids, **pix).logits
    assert model.vision_tower.iterations == 9
    assert not torch.allclose(before, after)
    with pytest.raises(ValueError):
        set_vision_iterations(model, 0)


def test_an_encoder_with_an_area_runs_larger_grids_for_proportionally_more_iterations():
    """With ``area_cells=81`` a 9x9 grid runs the encoder's 20 iterations and a 13x13 grid ceil(20 x 169 / 81) = 42,
    in passes with gradients too, where a drawn depth of 10-40 scales the same way."""
    torch.manual_seed(0)
    scaled = RecurrentConvEncoder(patch_px=2, width=4, iterations=20, state="gated", area_cells=81)
    plain = RecurrentConvEncoder(patch_px=2, width=4, iterations=20, state="gated")
    plain.load_state_dict(scaled.state_dict())
    small, large = torch.randn(2, 9, 9, 12), torch.randn(2, 13, 13, 12)
    with torch.no_grad():
        torch.testing.assert_close(scaled.cell_features(small), plain.cell_features(small, iterations=20))
        torch.testing.assert_close(scaled.cell_features(large), plain.cell_features(large, iterations=42))
        assert not torch.allclose(scaled.cell_features(large)[0], plain.cell_features(large)[0])
    assert (scaled.area_scaled(30, 169), scaled.area_scaled(30, 49), plain.area_scaled(30, 169)) == (63, 30, 30)
    with pytest.raises(ValueError, match="area_cells"):
        RecurrentConvEncoder(patch_px=2, width=4, iterations=20, area_cells=-1)


def test_truncated_encoder_gradient_keeps_the_forward_and_trains_the_shared_block(model_dir):
    """Backprop through the last k iterations: the same outputs, a gradient on the shared block, a different gradient
    from full backprop, and the full gradient again when k covers every iteration."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    tower = model.vision_tower
    ids, pix = inputs_for(model_dir, [frame(load_eval_set("VisMaze-v0")[0])])

    def grads(k):
        model.zero_grad()
        set_vision_grad_iterations(model, k)
        logits = model(input_ids=ids, **pix).logits
        logits[0, -1].logsumexp(-1).backward()
        return logits.detach(), {n: p.grad.clone() for n, p in tower.named_parameters() if p.grad is not None}

    full_logits, full = grads(0)
    cut_logits, cut = grads(1)
    assert torch.equal(full_logits, cut_logits)
    assert {"conv_in.weight", "conv_out.weight", "patch_embed.weight"} <= set(cut)
    assert not torch.allclose(full["conv_in.weight"], cut["conv_in.weight"])
    _, every = grads(tower.iterations)
    assert all(torch.equal(full[n], every[n]) for n in full)
    with pytest.raises(ValueError):
        set_vision_grad_iterations(model, -1)


def test_passes_with_gradients_draw_their_depth_from_the_range_and_others_keep_it(model_dir):
    """With a grad iteration range, a pass with gradients runs a count drawn from the range (the same batch the same
    count, both ends reachable); a pass without gradients keeps the encoder's own count."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    tower = model.vision_tower
    ids, pix = inputs_for(model_dir, [frame(load_eval_set("VisMaze-v0")[0])])
    with torch.no_grad():
        plain = model(input_ids=ids, **pix).logits
    set_vision_grad_iteration_range(model, 3, 5)
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids, **pix).logits, plain)  # rollouts and old log-probs: unchanged
    drawn = tower.drawn_iterations(pix["pixel_values"][None, None])
    assert drawn == tower.drawn_iterations(pix["pixel_values"][None, None]) and 3 <= drawn <= 5
    with_grad = model(input_ids=ids, **pix).logits
    set_vision_iterations(model, drawn)
    with torch.no_grad():
        assert torch.allclose(with_grad.detach(), model(input_ids=ids, **pix).logits, atol=1e-6)
    frames = [frame(m) for m in load_eval_set("VisMaze-v0")[:24]]
    counts = {tower.drawn_iterations(torch.as_tensor(f, dtype=torch.float32)[None]) for f in frames}
    assert counts == {3, 4, 5}
    with pytest.raises(ValueError):
        set_vision_grad_iteration_range(model, 4, 3)


def test_placeholder_count_mismatch_is_an_error(model_dir):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    ids, pix = inputs_for(model_dir, [frame(load_eval_set("VisMaze-v0")[0])])
    with pytest.raises(ValueError, match="placeholder"):
        model(input_ids=ids[:, 5:], **pix)


def test_hf_generator_plays_image_prompts(model_dir):
    from runners.rollout.generation.base import Prompt, SamplingConfig
    from runners.rollout.generation.hf import HFGenerator
    from mazegym.llm import build_messages, system_prompt, user_message
    import gymnasium as gym
    import mazegym  # noqa: F401

    generator = HFGenerator(model_dir)
    env = gym.make("VisMaze-v0", obs_mode="image")
    obs, info = env.reset(seed=0)
    messages = build_messages(system_prompt(9, 20, "image"), [], user_message(obs, info, obs_mode="image"), "none", 0)
    ids, images = generator.encoder.encode(messages)
    assert ids.count(generator.image_token_id) == 81
    results = generator.generate(
        [Prompt(prompt_ids=ids, images=images)] * 3, SamplingConfig(max_new_tokens=4, temperature=1.0, seed=0)
    )
    assert len(results) == 3 and all(1 <= len(r.response_ids) <= 4 for r in results)
    # Recorded log-probs equal teacher-forced scoring of the same reply.
    scored = generator.score(ids, results[0].response_ids, images)
    np.testing.assert_allclose(scored, results[0].logprobs, atol=1e-4)


def test_lora_with_trained_vision_tower_round_trips_and_merges(model_dir, tmp_path):
    from algos.policies.lm import LoRAConfig, LoRALMPolicy
    from algos.data import Turn
    from transformers import AutoImageProcessor

    lora = LoRAConfig(rank=4, alpha=8, modules_to_save=["vision_tower"])
    policy = LoRALMPolicy.from_pretrained(model_dir, lora, dtype=torch.float32)
    trained = {n for n, p in policy.model.named_parameters() if p.requires_grad}
    assert any("lora_" in n for n in trained) and any("vision_tower" in n for n in trained)
    assert not any("vision_tower" in n and "lora_" in n for n in trained), "LoRA stays on the language model"
    with torch.no_grad():  # move the adapter and the encoder away from their init
        for name, param in policy.model.named_parameters():
            if param.requires_grad:
                param.add_(0.05 * torch.randn_like(param))
    image = frame(load_eval_set("VisMaze-v0")[3])
    ids, _ = inputs_for(model_dir, [image])
    turn = Turn(prompt_ids=ids[0].tolist(), response_ids=[7, 8, 9], images=[image])
    before = policy.score_turns([turn]).logprobs
    policy.save_adapter(tmp_path / "adapter")
    fresh = LoRALMPolicy.from_pretrained(model_dir, lora, dtype=torch.float32, adapter=tmp_path / "adapter")
    torch.testing.assert_close(fresh.score_turns([turn]).logprobs, before)
    # Merged model (LoRA folded in, trained encoder kept) scores the same.
    merged = fresh.model.merge_and_unload()
    merged_policy = LoRALMPolicy(
        merged, LoRAConfig(rank=1), image_processor=AutoImageProcessor.from_pretrained(model_dir), pad_token_id=0
    )
    with merged_policy.model.disable_adapter():
        torch.testing.assert_close(merged_policy.score_turns([turn]).logprobs, before, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_sft_learns_to_localise_the_agent_and_to_move(tmp_path):
    """A short SFT run: the localisation loss collapses and the reply NLL falls far below chance."""
    from runners.config import apply_overrides
    from runners.build import run_sft
    from runners.config.presets import get_preset
    import json

    from runners.train.metrics import MetricsLogger

    config = apply_overrides(
        get_preset("cpu-maze-vlm"),
        [
            f"run_dir={tmp_path}",
            "model.vision_pretraining.steps=60",
            "sft.steps=120",
            "sft.batch_size=32",
            "model.vision_pretraining.batch_size=32",
            "logging.progress=false",
        ],
    )
    metrics = MetricsLogger(tmp_path, tensorboard=False)
    try:
        run_sft(config, log=lambda _: None, metrics=metrics)
    finally:
        metrics.close()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    vision = [r for r in records if r["phase"] == "vision"]
    sft = [r for r in records if r["phase"] == "sft"]
    assert len(vision) == 60 and len(sft) == 120
    # Vision pretraining: localisation is learnt in tens of steps, so the loss falls well below its start.
    assert vision[-1]["vision_loss"] < 0.6 * vision[0]["vision_loss"]
    # SFT on the frozen encoder: the reply NLL falls far below its start.
    assert sft[-1]["loss"] < 0.6 * sft[0]["loss"]


def test_vision_pretraining_updates_only_the_encoder(model_dir):
    """The pretraining objective reads the encoder alone: decoder and projector get no gradient, and it learns."""
    from mazegym.solver import oracle_actions

    model = MazeVLMForConditionalGeneration.from_pretrained(model_dir)
    processor = MazeVLMImageProcessor()
    specs = load_eval_set("VisMaze-v0")[:16]
    images = [frame(s) for s in specs]
    pixels = processor(images=images, return_tensors="pt")
    cells = torch.tensor([s.start[0] * 9 + s.start[1] for s in specs])
    actions = torch.tensor([int(oracle_actions(s)[0]) for s in specs])
    loss, accuracy = model.vision_pretraining_loss(pixels["pixel_values"], pixels["image_grid_thw"], cells, actions)
    assert torch.isfinite(loss) and 0.0 <= accuracy <= 1.0
    loss.backward()
    with_grad = {n.split(".")[0] for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert with_grad == {"vision_tower"}
    # A few full-batch steps on these 16 examples must cut the loss (the encoder can fit them).
    opt = torch.optim.AdamW(model.vision_tower.parameters(), lr=1e-2)
    first = loss.item()
    for _ in range(30):
        opt.zero_grad()
        loss, _ = model.vision_pretraining_loss(pixels["pixel_values"], pixels["image_grid_thw"], cells, actions)
        loss.backward()
        opt.step()
    assert float(loss) < 0.5 * first


def test_the_encoder_trained_inside_the_adapter_can_have_its_own_learning_rate(model_dir):
    import algos
    from algos.policies.lm import LoRAConfig, LoRALMPolicy

    policy = LoRALMPolicy.from_pretrained(
        model_dir, LoRAConfig(rank=4, alpha=8, modules_to_save=["vision_tower"]), dtype=torch.float32
    )
    saved = {id(p) for p in policy.saved_module_parameters()}
    names = {n for n, p in policy.model.named_parameters() if id(p) in saved}
    assert names and all("vision_tower" in n and "lora_" not in n for n in names)
    one = algos.make("grpo", policy, lr=1e-4)
    assert [g["lr"] for g in one.optimizer.param_groups] == [1e-4]
    two = algos.make("grpo", policy, lr=1e-4, saved_modules_lr=2e-3)
    lrs = {g["lr"]: {id(p) for p in g["params"]} for g in two.optimizer.param_groups}
    assert lrs == {1e-4: {id(p) for p in policy.trainable_parameters()} - saved, 2e-3: saved}
    with pytest.raises(ValueError, match="saved_modules_lr"):
        algos.make("grpo", policy, lr=1e-4, saved_modules_lr=0.0)


def test_agent_token_mode_gives_one_vision_token_on_any_maze_size(tmp_path):
    """``tokens="agent"``: one placeholder per image at 9x9 and 13x13; a batch of both equals separate forwards."""
    from transformers import AutoImageProcessor, AutoModelForImageTextToText

    model_dir = tiny_maze_vlm(tmp_path / "agent", tokens="agent")
    processor = AutoImageProcessor.from_pretrained(model_dir)
    assert processor.get_number_of_image_patches(225, 225, {}) == 1
    assert processor.get_number_of_image_patches(325, 325, {}) == 1
    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    images = [frame(load_eval_set("VisMaze-v0")[0]), frame(load_eval_set("heldout-13x13")[0])]
    pixels = processor(images=images, return_tensors="pt")
    with torch.no_grad():
        tokens, scores = model.image_features(pixels["pixel_values"], pixels["image_grid_thw"])
        assert tokens.shape == (2, 64) and [s.shape[0] for s in scores] == [81, 169]
        for i, image in enumerate(images):
            alone = processor(images=[image], return_tensors="pt")
            one, _ = model.image_features(alone["pixel_values"], alone["image_grid_thw"])
            torch.testing.assert_close(one[0], tokens[i])
    with pytest.raises(ValueError, match="tokens"):
        MazeVLMImageProcessor(tokens="patches")


def test_gated_state_update_is_bounded_loads_by_path_and_residual_stays_the_default(tmp_path):
    """``state="gated"``: the encoder's state stays in [-1, 1] however many iterations run (the residual one grows),
    the saved model reloads with its gate, and a model saved without the key is the residual encoder."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    from algos.models.maze_vlm import RecurrentConvEncoder

    gated_dir = tiny_maze_vlm(tmp_path / "gated", state="gated")
    model = AutoModelForImageTextToText.from_pretrained(gated_dir).eval()
    encoder = model.vision_tower
    assert encoder.conv_gate is not None and AutoConfig.from_pretrained(gated_dir).vision_config["state"] == "gated"
    torch.manual_seed(0)
    grid = torch.rand(2, 9, 9, encoder.patch_embed.in_features)
    residual = RecurrentConvEncoder(5, 8, 4)
    assert residual.conv_gate is None
    with torch.no_grad():
        for layer in (residual.conv_in, residual.conv_out):
            layer.weight.fill_(0.05)  # a positive feedback loop: the residual state grows without bound
        features, _ = encoder.cell_features(grid, iterations=500)
        state = features[..., :8]
        assert float(state.abs().max()) <= 1.0
        grown, _ = residual.cell_features(grid, iterations=500)
        assert float(grown[..., :8].max()) > 10.0
    with pytest.raises(ValueError, match="state"):
        RecurrentConvEncoder(5, 8, 4, state="lstm")


@pytest.mark.parametrize("state", ["gated", "residual"])
def test_the_block_computes_its_convolution_of_the_input_once(state):
    """Each iteration convolves only the state; the input's part of ``conv_in``/``conv_gate`` is computed once.
    The result is the written formula, conv(cat([state, recall])), iterated: values and gradients."""
    torch.manual_seed(0)
    encoder = RecurrentConvEncoder(patch_px=3, width=8, iterations=6, state=state)
    grid = torch.randn(3, 7, 7, 27)

    def written(grid):
        recall = torch.relu(encoder.patch_embed(grid)).permute(0, 3, 1, 2)
        h = torch.zeros_like(recall)
        for _ in range(encoder.iterations):
            both = torch.cat([h, recall], dim=1)
            update = torch.relu(encoder.conv_in(both))
            if state == "residual":
                h = torch.relu(h + encoder.conv_out(update))
            else:
                gate = torch.sigmoid(encoder.conv_gate(both))
                h = (1 - gate) * h + gate * torch.tanh(encoder.conv_out(update))
        return h.permute(0, 2, 3, 1).reshape(3, 49, -1)

    expected = written(grid)
    grads = torch.autograd.grad(expected.square().sum(), encoder.conv_in.weight)[0]
    features, _ = encoder.cell_features(grid)
    got = features[..., :8]
    assert torch.allclose(got, expected, atol=1e-5)
    assert torch.allclose(torch.autograd.grad(got.square().sum(), encoder.conv_in.weight)[0], grads, atol=1e-4)


@pytest.mark.slow
def test_a_model_trained_on_9x9_only_solves_larger_mazes_far_above_chance(tmp_path):
    """Extrapolation on a small budget: the default recipe's SFT with half its vision pretraining (600 batches of 64
    9x9 cells, random depths, path loss) and a decoder stage long enough to read the vision token, 9x9 only, solves
    11x11 mazes (VisMaze-Hard-v0, its encoder run ceil(20 x (11 / 9)^2) = 30 iterations), where random legal moves
    solve none. (At the full budget the main job's policy solves 63-64 of the 64.)"""
    from runners.build import build_generator
    from runners.config import apply_overrides
    from runners.config.presets import get_preset
    from mazegym.baselines import random_solve_rate
    from mazegym.evalsets import EVAL_SETS
    from runners.train.steps import eval_step
    from sft_cache import cached_sft_model

    model = cached_sft_model(60, "model.vision_pretraining.steps=600", preset="cpu-maze-vlm")
    config = apply_overrides(get_preset("cpu-maze-vlm"), [f"run_dir={tmp_path}", "logging.progress=false"])
    result = eval_step(build_generator(config, model, None), config, "VisMaze-Hard-v0")
    solved = round(result["solve_rate"] * 64)
    assert result["vision_iterations"] == 30
    hard = load_eval_set("VisMaze-Hard-v0")
    max_moves = EVAL_SETS["VisMaze-Hard-v0"].max_moves
    random_solved = np.mean([random_solve_rate(hard, max_moves, seed) for seed in range(4)])
    assert random_solved * len(hard) < 1
    assert solved >= 24, result


def test_the_path_loss_trains_the_path_head_against_the_shortest_path(tmp_path, model_dir):
    """With a path weight the loss adds the path head's binary cross-entropy at every cell; the head learns it."""
    from mazegym.solver import oracle_actions, shortest_path_cells

    directory = tiny_maze_vlm(tmp_path / "m", path_head=True)
    model = MazeVLMForConditionalGeneration.from_pretrained(directory)
    specs = load_eval_set("VisMaze-v0")[:8]
    pixels = MazeVLMImageProcessor()(images=[frame(s) for s in specs], return_tensors="pt")
    cells = torch.tensor([s.start[0] * 9 + s.start[1] for s in specs])
    actions = torch.tensor([int(oracle_actions(s)[0]) for s in specs])
    on_path = []
    for s in specs:
        mask = torch.zeros(81)
        mask[shortest_path_cells(s.grid, s.start, s.goal).tolist()] = 1.0
        on_path.append(mask)
    args = (pixels["pixel_values"], pixels["image_grid_thw"], cells, actions)
    without, _ = model.vision_pretraining_loss(*args)
    with_path, _ = model.vision_pretraining_loss(*args, on_path=on_path, path_weight=0.5)
    _, _, decisions = model.encode_images(pixels["pixel_values"], pixels["image_grid_thw"])
    logits = model.vision_tower.path_head(torch.cat(decisions)).squeeze(-1)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.cat(on_path))
    assert float(with_path - without) == pytest.approx(0.5 * float(expected), rel=1e-5)
    with pytest.raises(ValueError, match="path_head"):
        MazeVLMForConditionalGeneration.from_pretrained(model_dir).vision_pretraining_loss(
            *args, on_path=on_path, path_weight=0.5
        )
    opt = torch.optim.AdamW(model.vision_tower.parameters(), lr=1e-2)
    for _ in range(40):
        opt.zero_grad()
        _, _, decisions = model.encode_images(pixels["pixel_values"], pixels["image_grid_thw"])
        logits = model.vision_tower.path_head(torch.cat(decisions)).squeeze(-1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.cat(on_path))
        loss.backward()
        opt.step()
    assert float(loss) < 0.6 * float(expected)


def test_the_encoder_can_start_from_pytorchs_layer_init_while_the_decoder_keeps_its_own():
    """vision_config init "pytorch": every encoder layer within Kaiming-uniform's bound 1/sqrt(fan_in) (the LM's
    normal init at std 0.1 would exceed it), the projector and decoder as Qwen2 initialises them; "lm": the encoder
    as the decoder; anything else is refused."""
    from algos.models.maze_vlm import DEFAULT_VISION_CONFIG, MazeVLMConfig

    def built(init):
        torch.manual_seed(0)
        config = MazeVLMConfig(
            **TINY_DECODER,
            vocab_size=64,
            initializer_range=0.1,
            vision_config={**DEFAULT_VISION_CONFIG, "width": 16, "state": "gated", "init": init},
        )
        return MazeVLMForConditionalGeneration(config)

    pytorch, lm = built("pytorch"), built("lm")
    for name in ("conv_in", "conv_out", "conv_gate", "readout", "patch_embed"):
        weight = getattr(pytorch.vision_tower, name).weight
        bound = 1 / np.sqrt(weight[0].numel())
        assert float(weight.abs().max()) <= bound + 1e-6, name
        assert float(getattr(lm.vision_tower, name).weight.std()) == pytest.approx(0.1, rel=0.2), name
    assert float(pytorch.vision_tower.conv_in.bias.abs().max()) > 0  # PyTorch's bias init; the LM's is zero
    for model in (pytorch, lm):
        assert float(model.multi_modal_projector[0].weight.std()) == pytest.approx(0.1, rel=0.2)
        assert float(model.model.layers[0].mlp.up_proj.weight.std()) == pytest.approx(0.1, rel=0.2)
    with pytest.raises(ValueError, match="init"):
        built("xavier")


def test_the_colour_locator_finds_the_agent_on_every_cell_and_size_without_training(tmp_path):
    """``locator="colour"``: at its random init the encoder's agent weights sit on the agent's cell, wherever it
    stands (goal and walls included around it) on 9x9 and 13x13 mazes; the learned saliency does not at init."""
    from transformers import AutoImageProcessor, AutoModelForImageTextToText

    model_dir = tiny_maze_vlm(tmp_path / "colour", iterations=2, tokens="agent", locator="colour")
    processor = AutoImageProcessor.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    for spec in [*load_eval_set("VisMaze-v0")[:2], load_eval_set("heldout-13x13")[0]]:
        open_cells = [tuple(c) for c in np.argwhere(spec.grid == 0) if tuple(c) != tuple(spec.goal)]
        images = [frame(spec, cell) for cell in open_cells]
        pixels = processor(images=images, return_tensors="pt")
        with torch.no_grad():
            _, scores = model.image_features(pixels["pixel_values"], pixels["image_grid_thw"])
        cols = spec.grid.shape[1]
        for cell, score in zip(open_cells, scores):
            weights = torch.softmax(score, 0)
            assert int(weights.argmax()) == cell[0] * cols + cell[1]
            assert float(weights.max()) > 0.999
    with pytest.raises(ValueError, match="locator"):
        RecurrentConvEncoder(5, 8, 2, locator="oracle")


def test_a_model_built_to_scale_by_area_keeps_it_when_loaded_and_evaluation_leaves_it_its_own_depth(tmp_path):
    """``model.vision_iterations_by_area`` is written into the model's config (area = maze.size^2) and read back
    by path; evaluation then sets no depth of its own (the model scales each image), where a plain model is scaled by
    the run's rule (42 iterations on 13x13 for 20 at 9x9)."""
    from transformers import AutoModelForImageTextToText

    from runners.config import apply_overrides
    from runners.config.derived import eval_vision_iterations
    from runners.config.presets import get_preset
    from runners.models import BuildContext
    from runners.models import maze_vlm as spec

    config = apply_overrides(get_preset("cpu-maze-vlm"), ["model.vision_iterations_by_area=true"])
    spec.build(config.model, tmp_path / "area", BuildContext(seed=0, maze_size=9, env_kwargs={"cell_px": 25}))
    spec.build(
        get_preset("cpu-maze-vlm").model,
        tmp_path / "plain",
        BuildContext(seed=0, maze_size=9, env_kwargs={"cell_px": 25}),
    )
    area = AutoModelForImageTextToText.from_pretrained(tmp_path / "area")
    plain = AutoModelForImageTextToText.from_pretrained(tmp_path / "plain")
    assert (area.vision_tower.area_cells, plain.vision_tower.area_cells) == (81, 0)
    assert eval_vision_iterations(config, spec.vision_iterations(area), 13) is None
    assert eval_vision_iterations(config, spec.vision_iterations(plain), 13) == 42
    from runners.build import build_policy

    assert build_policy(config, tmp_path / "area").model is not None
    with pytest.raises(ValueError, match="model.vision_iterations_by_area=true, but the model at .* was built without"):
        build_policy(config, tmp_path / "plain")


def test_lora_on_the_encoders_convolutions_acts_as_its_merged_weights(tmp_path):
    """LoRA on the recurrence's convolutions (``lora.exclude_vision=false``, ``lora.target_modules``): the encoder's
    fused step applies the adapter's update exactly as the merged weights do, and a backward pass reaches it."""
    from transformers import AutoModelForImageTextToText

    from algos.policies.lm import LoRAConfig, add_lora

    model = AutoModelForImageTextToText.from_pretrained(tiny_maze_vlm(tmp_path / "m", state="gated")).eval()
    torch.manual_seed(0)
    grid = torch.rand(2, 9, 9, model.vision_tower.patch_embed.in_features)
    with torch.no_grad():
        plain, _ = model.vision_tower.cell_features(grid)
    convs = ["conv_in", "conv_out", "conv_gate"]
    adapted_model = add_lora(model, LoRAConfig(rank=4, alpha=8, target_modules=convs, exclude_vision=False))
    encoder = adapted_model.base_model.model.vision_tower
    assert all(hasattr(getattr(encoder, name), "lora_A") for name in convs)
    with torch.no_grad():
        for name, param in adapted_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape) * 0.1)
    adapted, _ = encoder.cell_features(grid)
    adapted.square().mean().backward()
    assert encoder.conv_in.lora_A["default"].weight.grad.abs().sum() > 0
    assert encoder.conv_out.lora_B["default"].weight.grad.abs().sum() > 0
    with torch.no_grad():
        merged, _ = adapted_model.merge_and_unload().vision_tower.cell_features(grid)
    assert not torch.allclose(adapted, plain, atol=1e-3)
    torch.testing.assert_close(adapted.detach(), merged, atol=1e-5, rtol=1e-5)
