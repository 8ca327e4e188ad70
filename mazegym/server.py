"""``python -m mazegym.server``: VisMaze over OpenEnv, as ``mazegym serve-env`` (needs ``mazegym[openenv]``)."""

if __name__ == "__main__":
    from mazegym.integrations.openenv_server import main

    raise SystemExit(main())
