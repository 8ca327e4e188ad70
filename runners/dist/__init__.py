"""Distribution: the Ray runner (:mod:`~runners.dist.ray_runner`), FSDP2 sharding and lockstep
(:mod:`~runners.dist.fsdp`), Prometheus export (:mod:`~runners.dist.prometheus`) and remote job
submission (:mod:`~runners.dist.submit`)."""
