"""Pages of a long list, server side: `?page=N` (from 1) of a fixed size, together with
the list's `?q=` filter, so that a page works without JavaScript and only its rows are
looked up (links, stored counts)."""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

PAGE_SIZE = 50
Item = TypeVar("Item")


@dataclass(frozen=True)
class Page:
    number: int  # 1-based, within 1..last
    size: int
    total: int  # items matching the filter

    @classmethod
    def of(cls, asked: str | None, total: int, size: int = PAGE_SIZE) -> Page:
        """The page asked for (`?page=`), kept within the pages there are: a page number
        that is not one, or past the end, shows the first or the last page."""
        last = max(1, math.ceil(total / size))
        try:
            number = int(asked or 1)
        except ValueError:
            number = 1
        return cls(min(max(number, 1), last), size, total)

    @property
    def last(self) -> int:
        return max(1, math.ceil(self.total / self.size))

    @property
    def first_index(self) -> int:
        """0-based index of the page's first item."""
        return (self.number - 1) * self.size

    def items(self, found: Sequence[Item]) -> list[Item]:
        return list(found[self.first_index : self.first_index + self.size])

    @property
    def range_text(self) -> str:
        """`51-100 of 1,000`, with an en dash ("0 of 0" when nothing matches)."""
        if self.total == 0:
            return "0 of 0"
        end = min(self.first_index + self.size, self.total)
        return f"{self.first_index + 1:,}\N{EN DASH}{end:,} of {self.total:,}"

    def links(self, query: str = "") -> dict[str, str | None]:
        """first/prev/next/last -> `?page=N[&q=...]`, None where there is no such page."""

        def href(number: int) -> str:
            params = {"page": str(number), **({"q": query} if query else {})}
            return "?" + urllib.parse.urlencode(params)

        at_start, at_end = self.number == 1, self.number == self.last
        return {
            "first": None if at_start else href(1),
            "prev": None if at_start else href(self.number - 1),
            "next": None if at_end else href(self.number + 1),
            "last": None if at_end else href(self.last),
        }
