"""Incremental Server-Sent Events parser for streamed completions.

Why our own parser: `async for line in resp.content` caps lines at the reader's high-water mark (big
usage or tool-call chunks then raise), and a per-line async iterator costs an event-loop round trip per
line. Here the caller feeds whatever bytes one `iter_any()` read returned and gets back every event that
became complete, so it can stamp all of them with the one clock reading taken when the read returned.

Framing follows the WHATWG SSE rules: lines end in `\\r\\n`, `\\n` or `\\r`; a blank line dispatches the
event; `:` lines are comments (keep-alives); several `data:` lines are joined with `\\n`; `event:` sets the
type; `id:`/`retry:`/unknown fields are ignored; an event not terminated by a blank line when the stream
ends is discarded (`has_partial` tells the caller that happened). Two deliberate additions for inference
servers: the OpenAI `[DONE]` sentinel ends the stream (`done` becomes True and later bytes are ignored),
and llama.cpp's non-standard `error: {...}` field line becomes an event of type `"error"`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DONE_SENTINEL = "[DONE]"
"""The `data` payload with which OpenAI-compatible servers end a stream."""

_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = "\ufeff"


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event: its `data` payload (data lines joined with `\\n`) and its type."""

    data: str
    event: str = "message"


class SSEParser:
    """Feed raw bytes in arrival order; get back the events that each feed completed.

    There is no line-length cap: a line may span any number of reads, and the search for a line end
    resumes where the previous read stopped, so a long line costs linear time.
    """

    __slots__ = ("_buf", "_data", "_event", "_scan", "_started", "done")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scan = 0
        """Offset in `_buf` before which no line end can start (already searched)."""
        self._data: list[str] = []
        self._event = ""
        self._started = False
        self.done = False
        """True once the `[DONE]` sentinel arrived; everything after it is ignored."""

    @property
    def has_partial(self) -> bool:
        """True when bytes or lines of an event that was never terminated are pending."""
        return not self.done and (bool(self._buf) or bool(self._data))

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume one read's bytes; return the events completed by them, in order.

        The `[DONE]` event itself is not returned: it sets `done`, and the rest of the chunk (and any
        later chunk) is dropped.
        """
        if self.done or not chunk:
            return []
        self._buf += chunk
        return self._parse(at_eof=False)

    def finish(self) -> list[SSEEvent]:
        """Call once when the stream ended: a trailing lone `\\r` then counts as a line end.

        An event still lacking its terminating blank line stays discarded, as the SSE rules require.
        """
        if self.done or not self._buf:
            return []
        return self._parse(at_eof=True)

    def _parse(self, *, at_eof: bool) -> list[SSEEvent]:
        buf = self._buf
        events: list[SSEEvent] = []
        line_start = 0
        search_from = self._scan
        while True:
            m = _LINE_END.search(buf, search_from)
            if m is None:
                self._scan = len(buf) - line_start
                break
            if not at_eof and m.end() == len(buf) and m.group() == b"\r":
                # A lone trailing "\r" may be the first half of a "\r\n" split across reads.
                self._scan = m.start() - line_start
                break
            line = buf[line_start : m.start()].decode("utf-8", errors="replace")
            line_start = search_from = m.end()
            event = self._line(line)
            if event is None:
                continue
            if event.data == DONE_SENTINEL:
                self.done = True
                buf.clear()
                self._scan = 0
                return events
            events.append(event)
        del buf[:line_start]
        return events

    def _line(self, line: str) -> SSEEvent | None:
        """Apply one complete line; return an event when the line is the blank one that ends it."""
        if not self._started:
            self._started = True
            line = line.removeprefix(_BOM)
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return None
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "error":
            # llama.cpp streams failures as `error: {json}`; surface them instead of ignoring the field.
            self._event = "error"
            self._data.append(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        event_type = self._event or "message"
        self._event = ""
        if not self._data:
            return None
        data = "\n".join(self._data)
        self._data = []
        return SSEEvent(data=data, event=event_type)


__all__ = ["DONE_SENTINEL", "SSEEvent", "SSEParser"]
