"""What a finished run leaves for people: the exported adapter (:mod:`~runners.artifacts.export`), the HTML run
report (:mod:`~runners.artifacts.report`) and the trained policy served over HTTP (:mod:`~runners.artifacts.serve`)."""
