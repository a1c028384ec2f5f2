"""The XLSX readers side by side, in this process: calamine (what the service uses when the pre-pass
allows it) against openpyxl's streaming read (what it used before, and still uses otherwise).

One workbook written by XlsxWriter as Excel writes them (text in the shared-string table, dates
formatted), `rows` orders of 8 columns; each reader parses it `rounds` times through the service's
own `load_document` (limits, pre-scan and rendering included) and the fastest round counts. The
extracted text of both must be the same.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from pathlib import Path
from typing import Any

from benchmarks.ingest_files import WORDS


def write_orders(path: Path, rows: int, seed: int) -> Path:
    """An order list: numbers, names, regions, dates and a short note per row."""
    import xlsxwriter

    rng = random.Random(seed)
    book = xlsxwriter.Workbook(str(path))
    sheet = book.add_worksheet("Orders")
    dates = book.add_format({"num_format": "yyyy-mm-dd"})
    sheet.write_row(0, 0, ["Order", "Customer", "Region", "Product", "Quantity", "Price", "Date", "Note"])
    for r in range(1, rows + 1):
        sheet.write_row(
            r,
            0,
            [
                r,
                f"{rng.choice(WORDS).capitalize()} {rng.choice(WORDS).capitalize()}",
                rng.choice(("North", "South", "East", "West")),
                rng.choice(WORDS),
                rng.randint(1, 500),
                round(rng.uniform(1, 900), 2),
            ],
        )
        sheet.write_datetime(r, 6, dt.datetime(2020, 1, 1) + dt.timedelta(days=rng.randint(0, 2000)), dates)
        sheet.write_string(r, 7, " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))))
    book.close()
    return path


def compare(folder: Path, rows: int, seed: int, rounds: int = 3) -> dict[str, Any]:
    """Seconds per reader (fastest of `rounds`), cells per second, and whether the texts agree."""
    from app.ingest.loaders import load_document, tabular

    folder.mkdir(parents=True, exist_ok=True)
    path = write_orders(folder / "orders.xlsx", rows, seed)
    allowed = getattr(tabular, "fast_read_allowed")  # noqa: B009 - the name the loader calls, replaced below

    def timed(fast: bool) -> tuple[float, list[str]]:
        setattr(tabular, "fast_read_allowed", allowed if fast else (lambda *args: False))  # noqa: B010
        best, texts = float("inf"), []
        try:
            for _ in range(rounds):
                started = time.perf_counter()
                doc = load_document(path, path.name)
                best = min(best, time.perf_counter() - started)
                texts = [s.text for s in doc.sections]
        finally:
            setattr(tabular, "fast_read_allowed", allowed)  # noqa: B010
        return best, texts

    openpyxl_s, slow = timed(False)
    calamine_s, fast = timed(True)
    cells = (rows + 1) * 8
    return {
        "rows": rows,
        "cells": cells,
        "bytes": path.stat().st_size,
        "openpyxl_s": round(openpyxl_s, 3),
        "calamine_s": round(calamine_s, 3),
        "openpyxl_cells_per_s": round(cells / openpyxl_s),
        "calamine_cells_per_s": round(cells / calamine_s),
        "speedup": round(openpyxl_s / calamine_s, 2),
        "same_text": fast == slow,
    }
