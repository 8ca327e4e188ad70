"""The shared ending of the doc generators: write a generated page atomically, or check that it is current."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable


def write_or_check(doc: Path, render: Callable[[], str], description: str, source: str) -> int:
    """Parse ``--check``; rewrite ``doc`` from ``render()`` (temp file, then rename), or exit 1 when it differs.

    ``source`` names what the page is generated from, for the help and the error message.
    """
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help=f"exit 1 when {doc.name} differs from {source}")
    check = p.parse_args().check
    text = render()
    if check:
        if (doc.read_text() if doc.exists() else "") != text:
            print(f"{doc} is out of date: run python {Path(sys.argv[0]).as_posix()}", file=sys.stderr)
            return 1
        return 0
    tmp = doc.with_name(f".{doc.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, doc)
    print(f"wrote {doc}")
    return 0
