"""Rollout: from mazes to episodes.

:mod:`~runners.rollout.generation` holds the sampling engines (transformers or vLLM) behind one
``Generator`` protocol; :mod:`~runners.rollout.collect` plays mazes with a generator (multi-turn
plays in groups) and returns :class:`algos.data.Episode` lists; :mod:`~runners.rollout.collectors`
is the registry of the ways a step's training episodes are collected (``plays``, ``branches``: the
4 one-move branches at every open cell); :mod:`~runners.rollout.evaluate` plays the fixed
evaluation sets and writes per-maze records.
"""
