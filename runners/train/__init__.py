"""Training: the RL step loop and everything a step writes.

:mod:`~runners.train.loop` is the one step loop (generate -> update -> sync -> eval -> checkpoint)
behind a ``StepExecutor``; :mod:`~runners.train.steps` holds the phase functions every executor
calls; :mod:`~runners.train.sft` the supervised stage before RL (:mod:`~runners.train.sft_result` finds its result,
:mod:`~runners.train.fingerprints` hashes model directories, :mod:`~runners.train.seeding` seeds a stage,
:mod:`~runners.train.freezing` freezes the vision tower); :mod:`~runners.train.sync` the
adapter hand-off to the engines; :mod:`~runners.train.parity` the sampler/trainer log-prob check;
:mod:`~runners.train.checkpoint` the checkpoint files; :mod:`~runners.train.metrics` the logs.
"""
