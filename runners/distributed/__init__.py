"""Distribution: the Ray runner (:mod:`~runners.distributed.ray_runner`), FSDP2 sharding and lockstep
(:mod:`~runners.distributed.fsdp`), Prometheus export (:mod:`~runners.distributed.prometheus`) and remote job
submission (:mod:`~runners.distributed.submit`)."""
