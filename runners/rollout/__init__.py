"""Rollout: from mazes to episodes.

:mod:`~runners.rollout.generation` holds the sampling engines (transformers or vLLM) behind one
``Generator`` protocol; :mod:`~runners.rollout.collect` plays mazes with a generator (multi-turn
plays, groups, branching at every cell) and returns :class:`algos.data.Episode` lists;
:mod:`~runners.rollout.evaluate` plays the fixed evaluation sets and writes per-maze records.
"""
