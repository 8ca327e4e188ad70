"""What the server and its clients agree on: the routes, the model name, the default address, and the rollout
settings a client needs to ask the policy as its run did."""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
MODEL_NAME = "mazegym"
"""The ``model`` name requests use (as in ``vllm serve --lora-modules mazegym=...``)."""
CLIENT_ROLLOUT_KEYS = (
    "obs_mode",
    "history",
    "history_k",
    "state_prompt",
    "size_free_prompt",
    "require_stop",
    "max_new_tokens",
    "max_moves",
)
"""The rollout settings a client must play with to ask the policy as its run did (the settings endpoint and
SERVING.md's in-process snippet both give these)."""

SETTINGS_PATH = "/v1/mazegym/settings"
CHAT_PATH = "/v1/chat/completions"
