"""What a finished run leaves for people: the exported adapter (:mod:`~runners.artifacts.export`)
and the HTML run report (:mod:`~runners.artifacts.report`)."""
