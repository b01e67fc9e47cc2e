"""The SSE parser must give the same events however the bytes are split into reads."""

from __future__ import annotations

import pytest

from specfrontier.load.sse import SSEEvent, SSEParser

STREAM = (
    b": keep-alive\n\n"
    b'data: {"a": 1}\n\n'
    b"event: delta\n"
    b"data: line one\n"
    b"data: line two\n"
    b"\n"
    b"id: 7\n"
    b"retry: 100\n"
    b"data:no-space\n\n"
    b"data: caf\xc3\xa9 \xe2\x82\xac\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    SSEEvent(data='{"a": 1}'),
    SSEEvent(data="line one\nline two", event="delta"),
    SSEEvent(data="no-space"),
    SSEEvent(data="café €"),
]


def parse_reads(reads: list[bytes]) -> tuple[list[SSEEvent], SSEParser]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    for read in reads:
        events.extend(parser.feed(read))
    events.extend(parser.finish())
    return events, parser


def test_whole_stream_in_one_read() -> None:
    events, parser = parse_reads([STREAM])
    assert events == EXPECTED
    assert parser.done
    assert not parser.has_partial


@pytest.mark.parametrize("framing", [b"\r\n", b"\r"])
def test_crlf_and_cr_framing_give_the_same_events(framing: bytes) -> None:
    events, parser = parse_reads([STREAM.replace(b"\n", framing)])
    assert events == EXPECTED
    assert parser.done


@pytest.mark.parametrize("framing", [b"\n", b"\r\n", b"\r"])
def test_split_at_every_byte_offset(framing: bytes) -> None:
    stream = STREAM.replace(b"\n", framing)
    for cut in range(len(stream) + 1):
        events, parser = parse_reads([stream[:cut], stream[cut:]])
        assert events == EXPECTED, f"split at {cut}"
        assert parser.done, f"split at {cut}"


def test_split_at_every_pair_of_offsets_crlf() -> None:
    # Three reads cover a "\r" and "\n" landing in different reads, and a UTF-8 sequence cut twice.
    stream = STREAM.replace(b"\n", b"\r\n")
    step = 3
    for a in range(0, len(stream) + 1, step):
        for b in range(a, len(stream) + 1, step):
            events, _ = parse_reads([stream[:a], stream[a:b], stream[b:]])
            assert events == EXPECTED, f"split at {a}, {b}"


def test_one_byte_per_read() -> None:
    events, parser = parse_reads([bytes([byte]) for byte in STREAM.replace(b"\n", b"\r\n")])
    assert events == EXPECTED
    assert parser.done


def test_feed_returns_only_events_completed_by_that_read() -> None:
    parser = SSEParser()
    assert parser.feed(b'data: {"x"') == []
    assert parser.has_partial
    assert parser.feed(b": 1}\n") == []
    assert parser.feed(b"\ndata: second\n\ndata: thi") == [SSEEvent('{"x": 1}'), SSEEvent("second")]
    assert parser.feed(b"rd\n\n") == [SSEEvent("third")]
    assert not parser.has_partial


def test_comment_only_and_empty_blocks_dispatch_nothing() -> None:
    events, _ = parse_reads([b": ping\n\n:\n\n\n\nevent: lonely\n\n"])
    assert events == []


def test_event_type_does_not_leak_into_the_next_event() -> None:
    events, _ = parse_reads([b"event: a\ndata: 1\n\ndata: 2\n\n"])
    assert events == [SSEEvent("1", event="a"), SSEEvent("2")]


def test_data_field_without_colon_is_an_empty_line_of_data() -> None:
    events, _ = parse_reads([b"data\ndata: x\n\n"])
    assert events == [SSEEvent("\nx")]


def test_only_one_leading_space_is_stripped() -> None:
    events, _ = parse_reads([b"data:   indented\n\n"])
    assert events == [SSEEvent("  indented")]


def test_done_stops_parsing_and_later_bytes_are_ignored() -> None:
    parser = SSEParser()
    events = parser.feed(b"data: 1\n\ndata: [DONE]\n\ndata: 2\n\n")
    assert events == [SSEEvent("1")]
    assert parser.done
    assert parser.feed(b"data: 3\n\n") == []
    assert parser.finish() == []
    assert not parser.has_partial


def test_unterminated_event_at_end_of_stream_is_discarded() -> None:
    events, parser = parse_reads([b"data: 1\n\ndata: 2\n"])
    assert events == [SSEEvent("1")]
    assert not parser.done
    assert parser.has_partial


def test_trailing_cr_is_a_line_end_at_end_of_stream() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: 1\r\r") == []  # the last "\r" might still be followed by "\n"
    assert parser.finish() == [SSEEvent("1")]


def test_llama_cpp_error_field_becomes_an_error_event() -> None:
    events, _ = parse_reads([b'error: {"code": 400, "message": "too long"}\n\n'])
    assert events == [SSEEvent('{"code": 400, "message": "too long"}', event="error")]


def test_byte_order_mark_at_stream_start_is_ignored() -> None:
    events, _ = parse_reads([b"\xef\xbb", b"\xbfdata: 1\n\n"])
    assert events == [SSEEvent("1")]


def test_very_long_line_across_many_reads() -> None:
    payload = b"x" * 3_000_000
    stream = b"data: " + payload + b"\n\n"
    reads = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]
    events, _ = parse_reads(reads)
    assert len(events) == 1
    assert events[0].data == payload.decode()
