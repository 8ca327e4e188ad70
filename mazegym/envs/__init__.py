"""Environment classes (registered by ``import mazegym``)."""
