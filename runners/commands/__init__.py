"""The ``mazegym`` commands, one module each (:mod:`runners.cli` dispatches to them).

Each module names its command (``NAME``, with ``HELP``, its one line in ``mazegym --help``), adds its parser
(``add_parser(subparsers, argv)``: flags, help and defaults) and runs it (``run(args)``, the exit code). Modules load
nothing heavy at import: ``mazegym --help`` stays fast, and a command loads torch only when it runs.
:mod:`~runners.commands.arguments` holds the arguments several commands share, :mod:`~runners.commands.run_config`
how a command assembles its config, :mod:`~runners.commands.errors` how a failure becomes one line and an exit code.
"""
