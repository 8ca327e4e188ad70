"""Adapters to other RL frameworks: OpenEnv, SkyRL-Gym and TRL, plus VisGym's protocol.

Each module imports its framework at the top and needs that framework's extra
(``pip install "mazegym[openenv]"``, ``[skyrl]``, ``[trl]``); :mod:`mazegym.integrations.visgym`
needs nothing more. ``import mazegym`` imports none of them. Guide: ``docs/integrations.md``.
"""
