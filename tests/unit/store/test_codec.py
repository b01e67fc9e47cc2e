"""The compact request encoding: lossless, small, and each part readable on its own."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from specfrontier.records import RequestRecord, RequestSpecStats
from specfrontier.store.codec import (
    decode_heads,
    decode_requests,
    decode_texts,
    encode_requests,
    heads_of,
    pack,
    text_hash,
    unpack,
)

MS = 1_000_000


def _streamed(rng: np.random.Generator, i: int, tokens: int, text: str) -> RequestRecord:
    """A request as a speculative engine streams it: 1-4 tokens per chunk, ~7 ms steps with jitter."""
    sizes = rng.integers(1, 5, size=tokens)
    steps = int(np.searchsorted(np.cumsum(sizes), tokens)) + 1
    sizes = sizes[:steps]
    sizes[-1] -= int(sizes.sum()) - tokens
    send = 10**13 + i * 37 * MS + int(rng.integers(0, MS))
    first = send + 40 * MS + int(rng.integers(0, 5 * MS))
    gaps = rng.normal(7 * MS, 0.3 * MS, size=steps).astype(np.int64)
    gaps[0] = 0
    chunks = first + np.cumsum(gaps)
    return RequestRecord(
        prompt_id=f"p{i % 64}",
        send_ns=send,
        end_ns=int(chunks[-1]) + MS,
        first_token_ns=first,
        chunk_ns=tuple(chunks.tolist()),
        chunk_tokens=tuple(sizes.tolist()),
        prompt_tokens=40 + i % 9,
        completion_tokens=tokens,
        spec=RequestSpecStats(3 * steps, tokens - steps, steps),
        finish_reason="length",
        output_text=text,
    )


def _odd_requests() -> list[RequestRecord]:
    """Every optional field absent or present, empty and non-ASCII strings, chunk token lists of their own length."""
    return [
        RequestRecord("a", 5, 9, None),
        RequestRecord("", 0, 0, 0, chunk_ns=(0,), chunk_tokens=(), output_text="", error=""),
        RequestRecord(
            "s1#t03",
            2**62,
            2**62 + 10,
            2**62 + 1,
            chunk_ns=(2**62 + 1, 2**62 + 1, 2**62 + 9),
            chunk_tokens=(5, 0),
            prompt_tokens=0,
            completion_tokens=7,
            spec=RequestSpecStats(4, 2, None),
            finish_reason="stop",
            output_text="café \u00d7 3 — 日本語 🙂",
        ),
        RequestRecord("b", 100, 50, None, error="HTTP 503: overloaded\nretry", finish_reason=None),
        RequestRecord("c", -7, 3, -2, chunk_ns=(-2, 1), spec=RequestSpecStats(0, 0, 0)),
    ]


def test_requests_come_back_equal_field_by_field() -> None:
    rng = np.random.default_rng(1)
    requests = [_streamed(rng, i, 64 + i, f"answer {i}") for i in range(40)] + _odd_requests()
    cell = encode_requests(requests)
    assert decode_requests(cell.head, cell.chunks, cell.text) == tuple(requests)
    assert cell.count == len(requests)


def test_an_empty_cell_round_trips() -> None:
    cell = encode_requests([])
    assert decode_requests(cell.head, cell.chunks, cell.text) == ()
    assert len(decode_heads(cell.head)) == 0


def test_heads_and_texts_read_without_chunks() -> None:
    requests = _odd_requests()
    cell = encode_requests(requests)
    heads = decode_heads(cell.head)
    in_memory = heads_of(requests)
    assert heads.send_ns.tolist() == in_memory.send_ns.tolist() == [r.send_ns for r in requests]
    assert heads.end_ns.tolist() == [r.end_ns for r in requests]
    assert heads.spec == in_memory.spec == tuple(r.spec for r in requests)
    assert heads.prompt_ids == tuple(r.prompt_id for r in requests)
    assert heads.first_token_ns == tuple(r.first_token_ns for r in requests)
    assert heads.errors == tuple(r.error for r in requests)
    assert heads.text_hashes == tuple(text_hash(r.output_text) for r in requests)
    assert decode_texts(heads, cell.text) == tuple(r.output_text for r in requests)


def test_equal_texts_have_equal_hashes_and_different_texts_do_not() -> None:
    assert text_hash("the same") == text_hash("the same")
    assert text_hash("the same") != text_hash("the same.")
    assert len(text_hash("")) == 8


def test_a_512_token_request_takes_well_under_a_kilobyte() -> None:
    """Issue 18's bound (<= 1,000 bytes per request) for the seed run's 512-token outputs, with real-looking
    jittered nanosecond times: the JSON rows of schema 4 took ~8 KB for the same requests."""
    rng = np.random.default_rng(7)
    requests = [_streamed(rng, i, 512, "") for i in range(500)]
    cell = encode_requests(requests)
    per_request = (len(cell.head) + len(cell.chunks) + len(cell.text)) / len(requests)
    assert per_request < 1000
    assert decode_requests(cell.head, cell.chunks, cell.text) == tuple(requests)


def test_integer_columns_are_stored_in_their_narrowest_type() -> None:
    blob = pack({"small": np.array([1, -3, 100], dtype=np.int64), "wide": np.array([2**40, 0], dtype=np.int64)})
    raw = zlib.decompress(blob)
    assert b'"small","|i1"' in raw and b'"wide","<i8"' in raw
    columns = unpack(blob)
    assert columns["small"].dtype == np.int64 and columns["small"].tolist() == [1, -3, 100]
    assert columns["wide"].tolist() == [2**40, 0]


def test_a_blob_of_another_format_is_refused() -> None:
    raw = zlib.decompress(pack({"x": np.array([1], dtype=np.int64)})).replace(b'"format":1', b'"format":9')
    with pytest.raises(ValueError, match="request blob format 9"):
        unpack(zlib.compress(raw))


def test_timing_records_keep_what_goodput_reads_and_give_the_same_goodput() -> None:
    from specfrontier.metrics.slo import parse_slo, window_goodput

    rng = np.random.default_rng(11)
    requests = [_streamed(rng, i, 16 + i, f"t{i}") for i in range(30)] + _odd_requests()
    timing = heads_of(requests).timing_records()
    assert all(t.chunk_ns == () and t.output_text == "" for t in timing)
    assert [(t.send_ns, t.first_token_ns, t.end_ns, t.completion_tokens, t.error) for t in timing] == [
        (r.send_ns, r.first_token_ns, r.end_ns, r.completion_tokens, r.error) for r in requests
    ]
    slos = parse_slo("ttft_p90_ms=42,tpot_p99_ms=7.1,e2e_p50_ms=300")
    assert window_goodput(timing, slos) == window_goodput(requests, slos)
