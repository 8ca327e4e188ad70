"""Shared pytest setup. Keep it small: fixtures belong in the test files that use them."""

import os

# Keep torch and BLAS from oversubscribing the 2-core CI machines.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


QUICK_MODULES = {
    "test_env.py",
    "test_env_wrappers.py",
    "test_evalsets.py",
    "test_llm_interface.py",
    "test_multiagent.py",
    "test_stats.py",
    "test_bench.py",
    "test_advantages.py",
    "test_losses.py",
    "test_algos.py",
    "test_config.py",
    "test_config_keys.py",
    "test_layering.py",
    "test_code_shape.py",
    "test_drift.py",
    "test_branches.py",
    "test_metrics.py",
    "test_cli_arguments.py",
    "test_config_ranges.py",
    "test_env_input.py",
    "test_eval_command.py",
    "test_resume_reporting.py",
    "test_hostile_replies.py",
    "test_safe_loading.py",
}
"""The modules of the ``quick`` loop (``pytest -m quick``): every layer's unit tests, no model trained end to end."""


def pytest_collection_modifyitems(config, items):
    """Mark the tests of :data:`QUICK_MODULES` that are not ``slow`` as ``quick``."""
    import pytest

    for item in items:
        if item.path.name in QUICK_MODULES and "slow" not in item.keywords:
            item.add_marker(pytest.mark.quick)
