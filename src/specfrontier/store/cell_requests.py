"""A stored cell's requests, read from the store only when a reader asks for them.

Most readers of a run need a cell's figures (its stored digest), not its requests; decoding every
request of a million-request run for them would take minutes and gigabytes. So `Store.cells` hands out
a `CellRequests` per cell: a sequence that knows its length, decodes the whole cell on first use and
keeps it, and offers the cheaper parts on their own: `heads()` (per-request columns, no chunks or texts:
counting and per-turn readers) and `texts()` (the output texts, for the gate's examples).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import overload

from specfrontier.records import RequestRecord
from specfrontier.store.codec import RequestHeads, heads_of


class CellRequests(Sequence[RequestRecord]):
    """The requests of one stored cell, decoded on first use (see the module docstring)."""

    __slots__ = ("_count", "_heads", "_read_all", "_read_heads", "_read_texts", "_records", "_texts")

    def __init__(
        self,
        count: int,
        read_all: Callable[[], tuple[RequestRecord, ...]],
        read_heads: Callable[[], RequestHeads] | None = None,
        read_texts: Callable[[], tuple[str, ...]] | None = None,
    ) -> None:
        self._count = count
        self._read_all = read_all
        self._read_heads = read_heads
        self._read_texts = read_texts
        self._records: tuple[RequestRecord, ...] | None = None
        self._heads: RequestHeads | None = None
        self._texts: tuple[str, ...] | None = None

    def _all(self) -> tuple[RequestRecord, ...]:
        if self._records is None:
            self._records = self._read_all()
        return self._records

    def heads(self) -> RequestHeads:
        """Per-request columns without chunk times or texts (the whole cell is decoded only if no cheaper
        reader was given, as for a schema-4 cell)."""
        if self._heads is None:
            self._heads = self._read_heads() if self._read_heads and self._records is None else heads_of(self._all())
        return self._heads

    def texts(self) -> tuple[str, ...]:
        """The output texts, in request order."""
        if self._texts is None:
            if self._read_texts is not None and self._records is None:
                self._texts = self._read_texts()
            else:
                self._texts = tuple(r.output_text for r in self._all())
        return self._texts

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> RequestRecord: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[RequestRecord]: ...
    def __getitem__(self, index: int | slice) -> RequestRecord | Sequence[RequestRecord]:
        return self._all()[index]

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return f"CellRequests({self._count} requests)"


def request_heads(requests: Sequence[RequestRecord]) -> RequestHeads:
    """Heads of any request sequence: read cheaply from a stored cell, derived from records otherwise."""
    if isinstance(requests, CellRequests):
        return requests.heads()
    return heads_of(requests)


def request_texts(requests: Sequence[RequestRecord]) -> tuple[str, ...]:
    """Output texts of any request sequence (a stored cell reads only its text blob)."""
    if isinstance(requests, CellRequests):
        return requests.texts()
    return tuple(r.output_text for r in requests)


__all__ = ["CellRequests", "request_heads", "request_texts"]
