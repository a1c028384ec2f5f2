"""`python -m benchmarks.quality.natural.dense_windows_cli [CAPTURE]`: embed a capture's V1 windows once.

The windows (dense_windows.py) of every V1 chunk of a replay capture, written beside it for the
`v1w-*` vector sources of `replay score`; it checks that pooling them gives the stored vectors back.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.quality.natural.dense_windows import Windows, make, path_for


def main(argv: Sequence[str] | None = None) -> int:
    """Command line."""
    from app.clients.embeddings.local import shared_runtime
    from benchmarks.quality.natural import replay

    p = argparse.ArgumentParser(
        prog="python -m benchmarks.quality.natural.dense_windows_cli", description=__doc__
    )
    p.add_argument("capture", type=Path, nargs="?", default=None)
    a = p.parse_args(argv)
    capture = a.capture or replay.DATA_ROOT / "bench-results" / "replay" / "capture-others60.pkl"
    doc = replay.load_document(capture)
    runtime = shared_runtime()
    out: dict[str, Windows] = {}
    for kb, data in sorted(doc["kbs"].items()):
        out[kb], lowest = make(data, runtime)
        print(f"{kb}: {len(data.v1_texts)} V1 chunks, {len(out[kb].texts)} windows; pooled windows to stored "
              f"vector, lowest cosine {lowest:.4f}")  # fmt: skip
    with path_for(capture).open("wb") as f:
        pickle.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
