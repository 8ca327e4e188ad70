"""The algorithm zoo: GRPO (default), Dr.GRPO, DAPO, RLOO, GiGPO and PPO behind one registry.

``import algos`` is torch-free; torch is imported when an algorithm or policy is first used::

    import algos
    algo = algos.make("grpo", policy, lr=1e-5)   # algos.DEFAULT == "grpo"
    metrics = algo.update(episodes)              # list[algos.data.Episode]
"""

from algos.data import Episode, Turn
from algos.registry import (
    DEFAULT,
    ROLLOUT_SCHEMES,
    available,
    config_class,
    get,
    make,
    make_config,
    register,
    rollout_schemes,
)

__all__ = [
    "DEFAULT",
    "ROLLOUT_SCHEMES",
    "Episode",
    "Turn",
    "available",
    "config_class",
    "get",
    "make",
    "make_config",
    "register",
    "rollout_schemes",
]
