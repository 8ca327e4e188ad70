"""Generated documentation stays in step with the code."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_algorithms_page_matches_the_registry():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_algorithms_doc.py"), "--check"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    page = (ROOT / "docs" / "algorithms.md").read_text()
    # the built-in algorithms (other tests register more in this process, so not algos.available())
    for name in ("grpo", "ppo", "rloo", "dr_grpo", "dapo", "gigpo"):
        assert f"## `{name}`" in page
    assert "| `negative_weight` |" in page and "| `vf_coef` |" in page  # shared and PPO-only fields
