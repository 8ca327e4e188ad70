"""Model definitions that ship with mazegym, registered with the transformers Auto classes on import."""

from algos.models.maze_vlm import register

register()
