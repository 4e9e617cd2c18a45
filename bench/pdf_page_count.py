"""Refusing a PDF of too many pages: our reader (PDFium counts the pages before pypdf reads any)
against pypdf counting them itself, side by side in one run.

    python bench/pdf_page_count.py [--pages 20000] [--rounds 3]

A PDF of blank pages, written once by pypdf, is refused by read_document (max_document_pages is
1,000 by default) and counted by pypdf's PdfReader, rounds alternating which goes first.
Reported: seconds each way (median) and the ratio of pypdf's time to ours.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engines import MediaError  # noqa: E402
from harness.blank_pdf import blank_pdf  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402
from engines.prompt.documents import read_document  # noqa: E402
from limits import Limits  # noqa: E402


def ours(data: bytes, pages: int) -> float:
    started = time.perf_counter()
    try:
        read_document(data, "many.pdf", Limits(max_document_pages=pages - 1))
    except MediaError as error:
        assert f"has {pages:,} pages" in str(error), error
    else:
        raise AssertionError("a PDF over the page limit was read")
    return time.perf_counter() - started


def pypdf_alone(data: bytes, pages: int) -> float:
    from pypdf import PdfReader

    started = time.perf_counter()
    assert len(PdfReader(io.BytesIO(data)).pages) == pages
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = blank_pdf(args.pages)
    times: dict[str, list[float]] = {"ours": [], "pypdf": []}
    for round_ in range(args.rounds):
        order = [("ours", ours), ("pypdf", pypdf_alone)]
        for name, way in order if round_ % 2 == 0 else reversed(order):
            times[name].append(way(data, args.pages))
    ours_s, pypdf_s = statistics.median(times["ours"]), statistics.median(times["pypdf"])
    print(f"A PDF of {args.pages:,} blank pages ({len(data) / 2**20:.1f} MB), {args.rounds} rounds, median seconds:\n")
    print(markdown_table(["way", "seconds"], [["read_document refuses it (PDFium counts)", f"{ours_s:.3f}"],
                                              ["pypdf counts its pages", f"{pypdf_s:.3f}"]]))
    print(f"\npypdf / ours: {pypdf_s / ours_s:.0f}x")


if __name__ == "__main__":
    main()
