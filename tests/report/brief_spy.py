"""The PDF brief with its drawing calls recorded: the PDF's own text is glyph ids, so the report tests
read what each section helper asked for (headings, tables, paragraphs) in order instead."""

from __future__ import annotations

from typing import Any

from bakeoff.report import pdf
from bakeoff.report.data import ReportData


class BriefSpy(pdf.Brief):
    """The brief, keeping what its section helpers were asked to set, in order."""

    def __init__(self, d: ReportData):
        super().__init__(d)
        self.seen: list[Any] = []

    def h2(self, text: str) -> None:
        self.seen.append(text)

    def grid(self, head: list[str], rows: list[list[str]], widths: tuple[float, ...] | None = None) -> None:
        self.seen.append((head, rows))

    def para(self, text: str, size: float = 8.5, bold: bool = False) -> None:
        self.seen.append(text)
