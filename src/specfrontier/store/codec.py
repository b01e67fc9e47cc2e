"""Compact, lossless encoding of a cell's requests: three compressed columnar blobs per cell.

Why not a row per request with JSON text (schema 4): a 512-token request kept its chunk times as ~5 KB
of JSON digits, so a million-request sweep needed ~8 GB and a report decoded hundreds of millions of
Python ints. Here every column of a cell is a numpy array; integers are delta-encoded where they grow
(send times from request to request, chunk times within a request, every other time from its send),
stored in the narrowest integer type that holds them, byte-shuffled (all low bytes, then all next
bytes ...: the high bytes of close times are equal and compress to almost nothing) and deflated with
zlib. Nothing is rounded: decoding gives back the exact nanosecond values.

A cell has three blobs so that each reader pays only for what it needs:
- `head`: one entry per request: prompt id, times (send, first token, end), token counts, the
  server's speculative counts, finish reason, error, number of chunks, output length and an 8-byte
  BLAKE2b hash of the output text (what the correctness gate compares);
- `chunks`: every chunk's arrival time and, where the server reported them, its tokens (timing figures,
  time slices, steady state);
- `text`: the output texts (the gate's examples and the HTML report's sample outputs).

The layout of one blob: a 4-byte header length, a JSON header listing each column (name, numpy
dtype, length), then the columns' bytes, all deflated. A new column is a new header entry, so a reader
tells a blob it cannot read from one it can by the header alone.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import numpy.typing as npt

from specfrontier.records import RequestRecord, RequestSpecStats

BLOB_FORMAT = 1
"""Version of the blob layout (in each header); a reader refuses a blob of another version."""
TEXT_HASH_BYTES = 8
_ZLIB_LEVEL = 6
_MISSING = -1
"""Length of an absent string or array (None), distinct from an empty one (0)."""

IntArray = npt.NDArray[np.int64]


def text_hash(text: str) -> bytes:
    """The 8-byte BLAKE2b digest of an output text: equal texts, equal hashes (collisions: ~2**-64)."""
    return _hash(text.encode("utf-8"))


def _hash(utf8: bytes) -> bytes:
    return hashlib.blake2b(utf8, digest_size=TEXT_HASH_BYTES).digest()


# -- columns -> blob -------------------------------------------------------------------------------
def _narrow(values: IntArray) -> npt.NDArray[np.signedinteger]:
    """The narrowest signed integer type holding every value (deltas of close times fit in 1-4 bytes)."""
    if values.size == 0:
        return values.astype(np.int8)
    low, high = int(values.min()), int(values.max())
    for dtype in (np.int8, np.int16, np.int32):
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return values.astype(dtype)
    return values


def _shuffled(values: np.ndarray) -> bytes:
    """Bytes grouped by significance (byte 0 of every value, then byte 1 ...): similar magnitudes leave
    long runs of equal high bytes, which deflate removes."""
    width = values.dtype.itemsize
    if width == 1:
        return values.tobytes()
    return np.ascontiguousarray(values.view(np.uint8).reshape(-1, width).T).tobytes()


def _unshuffled(raw: bytes, dtype: np.dtype, count: int) -> np.ndarray:
    width = dtype.itemsize
    planes = np.frombuffer(raw, dtype=np.uint8)
    if width == 1:
        return planes.view(dtype).copy()
    return np.ascontiguousarray(planes.reshape(width, count).T).view(dtype).reshape(count)


def pack(columns: dict[str, np.ndarray]) -> bytes:
    """One blob of named 1-D columns: int64 columns narrowed, all shuffled, deflated together."""
    header: list[list[object]] = []
    parts: list[bytes] = []
    for name, column in columns.items():
        values = _narrow(column) if column.dtype == np.int64 else column
        header.append([name, values.dtype.str, int(values.size)])
        parts.append(_shuffled(values))
    head = json.dumps({"format": BLOB_FORMAT, "columns": header}, separators=(",", ":")).encode()
    return zlib.compress(struct.pack("<I", len(head)) + head + b"".join(parts), _ZLIB_LEVEL)


def unpack(blob: bytes) -> dict[str, np.ndarray]:
    """The columns of a blob written by `pack` (integer columns widened back to int64)."""
    raw = zlib.decompress(blob)
    (size,) = struct.unpack_from("<I", raw)
    header = json.loads(raw[4 : 4 + size])
    if header.get("format") != BLOB_FORMAT:
        raise ValueError(f"request blob format {header.get('format')!r}: this specfrontier reads {BLOB_FORMAT}")
    out: dict[str, np.ndarray] = {}
    at = 4 + size
    for name, dtype_str, count in header["columns"]:
        dtype = np.dtype(dtype_str)
        end = at + dtype.itemsize * count
        values = _unshuffled(raw[at:end], dtype, count)
        out[name] = values.astype(np.int64) if dtype.kind == "i" else values
        at = end
    return out


def _strings(values: Iterable[str | None]) -> tuple[IntArray, np.ndarray]:
    """(byte lengths, -1 for None; the UTF-8 bytes end to end)."""
    encoded = [None if v is None else v.encode("utf-8") for v in values]
    lengths = np.array([_MISSING if b is None else len(b) for b in encoded], dtype=np.int64)
    return lengths, np.frombuffer(b"".join(b for b in encoded if b), dtype=np.uint8)


def _split_strings(lengths: IntArray, data: np.ndarray) -> list[str | None]:
    raw = data.tobytes()
    out: list[str | None] = []
    at = 0
    for n in lengths.tolist():
        if n == _MISSING:
            out.append(None)
            continue
        out.append(raw[at : at + n].decode("utf-8"))
        at += n
    return out


def _optional(values: Iterable[int | None]) -> tuple[IntArray, np.ndarray]:
    """(values with None as 0; a mask of which were present)."""
    items = list(values)
    mask = np.array([v is not None for v in items], dtype=np.bool_)
    return np.array([0 if v is None else v for v in items], dtype=np.int64), mask


# -- requests -> blobs -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class EncodedCell:
    """A cell's requests as stored: `head` (per request), `chunks` (per chunk), `text` (outputs)."""

    count: int
    head: bytes
    chunks: bytes
    text: bytes

    def parts(self) -> tuple[tuple[str, bytes], ...]:
        """(part name, blob) as stored in `request_blob`."""
        return (("head", self.head), ("chunks", self.chunks), ("text", self.text))


@dataclass(frozen=True, slots=True)
class _Texts:
    """A cell's output texts, UTF-8 encoded once for the head (lengths, hashes) and the text blob."""

    lengths: IntArray
    hashes: np.ndarray
    """8 bytes per text, one byte per value: hashes do not compress, and shuffling them would not help."""
    data: np.ndarray

    @classmethod
    def of(cls, requests: Sequence[RequestRecord]) -> _Texts:
        encoded = [r.output_text.encode("utf-8") for r in requests]
        return cls(
            np.array([len(b) for b in encoded], dtype=np.int64),
            np.frombuffer(b"".join(_hash(b) for b in encoded), dtype=np.uint8),
            np.frombuffer(b"".join(encoded), dtype=np.uint8),
        )


def _head_columns(requests: Sequence[RequestRecord], texts: _Texts) -> dict[str, np.ndarray]:
    """The per-request columns of a cell (times as deltas from the send, sends as deltas from the last)."""
    send = np.array([r.send_ns for r in requests], dtype=np.int64)
    first, has_first = _optional(r.first_token_ns for r in requests)
    prompt_tokens, has_prompt = _optional(r.prompt_tokens for r in requests)
    completion, has_completion = _optional(r.completion_tokens for r in requests)
    drafted, has_spec = _optional(r.spec.draft_tokens if r.spec else None for r in requests)
    accepted, _ = _optional(r.spec.accepted_tokens if r.spec else None for r in requests)
    steps, has_steps = _optional(r.spec.verify_steps if r.spec else None for r in requests)
    prompt_len, prompt_bytes = _strings(r.prompt_id for r in requests)
    reason_len, reason_bytes = _strings(r.finish_reason for r in requests)
    error_len, error_bytes = _strings(r.error for r in requests)
    return {
        "send_delta": np.diff(send, prepend=np.int64(0)),
        "first_after_send": np.where(has_first, first - send, 0),
        "has_first": has_first,
        "end_after_send": np.array([r.end_ns for r in requests], dtype=np.int64) - send,
        "prompt_tokens": prompt_tokens,
        "has_prompt_tokens": has_prompt,
        "completion_tokens": completion,
        "has_completion_tokens": has_completion,
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
        "verify_steps": steps,
        "has_spec": has_spec,
        "has_verify_steps": has_steps,
        "chunk_count": np.array([len(r.chunk_ns) for r in requests], dtype=np.int64),
        "chunk_tokens_count": np.array(
            [_MISSING if r.chunk_tokens is None else len(r.chunk_tokens) for r in requests], dtype=np.int64
        ),
        "prompt_len": prompt_len,
        "prompt_bytes": prompt_bytes,
        "reason_len": reason_len,
        "reason_bytes": reason_bytes,
        "error_len": error_len,
        "error_bytes": error_bytes,
        "text_len": texts.lengths,
        "text_hash": texts.hashes,
    }


def encode_requests(requests: Sequence[RequestRecord]) -> EncodedCell:
    """The three blobs of a cell's requests; `decode_requests` gives back equal records."""
    chunks = pack({"chunk_delta": _chunk_deltas(requests), "chunk_tokens": _chunk_token_values(requests)})
    texts = _Texts.of(requests)
    return EncodedCell(len(requests), pack(_head_columns(requests, texts)), chunks, pack({"text_bytes": texts.data}))


def _chunk_deltas(requests: Sequence[RequestRecord]) -> IntArray:
    """Per request: its first chunk after its send, every later chunk after the one before (over the
    cell's chunks at once: a numpy call per request costs more than its arithmetic)."""
    lengths = np.fromiter((len(r.chunk_ns) for r in requests), dtype=np.int64, count=len(requests))
    times = np.fromiter(chain.from_iterable(r.chunk_ns for r in requests), dtype=np.int64, count=int(lengths.sum()))
    deltas = np.diff(times, prepend=np.int64(0))
    has_chunks = lengths > 0
    firsts = (np.cumsum(lengths) - lengths)[has_chunks]
    sends = np.fromiter((r.send_ns for r in requests), dtype=np.int64, count=len(requests))[has_chunks]
    deltas[firsts] = times[firsts] - sends
    return deltas


def _chunk_token_values(requests: Sequence[RequestRecord]) -> IntArray:
    return np.fromiter(chain.from_iterable(r.chunk_tokens or () for r in requests), dtype=np.int64)


# -- blobs -> requests -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RequestHeads:
    """The per-request columns of a cell without its chunks or texts (what counting readers need)."""

    prompt_ids: tuple[str, ...]
    send_ns: IntArray
    first_token_ns: tuple[int | None, ...]
    end_ns: IntArray
    prompt_tokens: tuple[int | None, ...]
    completion_tokens: tuple[int | None, ...]
    spec: tuple[RequestSpecStats | None, ...]
    finish_reasons: tuple[str | None, ...]
    errors: tuple[str | None, ...]
    chunk_counts: IntArray
    chunk_token_counts: IntArray
    text_lengths: IntArray
    """Bytes of each output text (UTF-8)."""
    text_hashes: tuple[bytes, ...]

    def __len__(self) -> int:
        return len(self.prompt_ids)

    def timing_records(self) -> tuple[RequestRecord, ...]:
        """The requests with their times, counts, finish reason and error, but WITHOUT chunk times and
        output texts (empty): for readers of per-request latencies and counts only (goodput under SLOs),
        which then read a cell's head blob instead of all of it."""
        count = len(self)
        return self.records(((),) * count, (None,) * count, ("",) * count)

    def records(
        self,
        chunk_ns: Sequence[tuple[int, ...]],
        chunk_tokens: Sequence[tuple[int, ...] | None],
        texts: Sequence[str],
    ) -> tuple[RequestRecord, ...]:
        """The requests of these heads with the given chunks and texts, one per request."""
        send, end = self.send_ns.tolist(), self.end_ns.tolist()
        return tuple(
            RequestRecord(
                prompt_id=self.prompt_ids[i],
                send_ns=send[i],
                end_ns=end[i],
                first_token_ns=self.first_token_ns[i],
                chunk_ns=chunk_ns[i],
                chunk_tokens=chunk_tokens[i],
                prompt_tokens=self.prompt_tokens[i],
                completion_tokens=self.completion_tokens[i],
                spec=self.spec[i],
                finish_reason=self.finish_reasons[i],
                output_text=texts[i],
                error=self.errors[i],
            )
            for i in range(len(self))
        )


def _with_mask(values: IntArray, mask: np.ndarray) -> tuple[int | None, ...]:
    return tuple(v if present else None for v, present in zip(values.tolist(), mask.tolist(), strict=True))


def decode_heads(blob: bytes) -> RequestHeads:
    """The head blob of a cell, decoded."""
    return _heads(unpack(blob))


def heads_of(requests: Sequence[RequestRecord]) -> RequestHeads:
    """The heads of records in memory (what `decode_heads` gives for their stored cell)."""
    return _heads(_head_columns(requests, _Texts.of(requests)))


def _heads(c: dict[str, np.ndarray]) -> RequestHeads:
    send = np.cumsum(c["send_delta"])
    has_spec, has_steps = c["has_spec"].tolist(), c["has_verify_steps"].tolist()
    spec = tuple(
        RequestSpecStats(d, a, s if has_s else None) if present else None
        for d, a, s, present, has_s in zip(
            c["draft_tokens"].tolist(),
            c["accepted_tokens"].tolist(),
            c["verify_steps"].tolist(),
            has_spec,
            has_steps,
            strict=True,
        )
    )
    raw_hashes = c["text_hash"].tobytes()
    count = len(send)
    return RequestHeads(
        prompt_ids=tuple(p or "" for p in _split_strings(c["prompt_len"], c["prompt_bytes"])),
        send_ns=send,
        first_token_ns=_with_mask(c["first_after_send"] + send, c["has_first"]),
        end_ns=c["end_after_send"] + send,
        prompt_tokens=_with_mask(c["prompt_tokens"], c["has_prompt_tokens"]),
        completion_tokens=_with_mask(c["completion_tokens"], c["has_completion_tokens"]),
        spec=spec,
        finish_reasons=tuple(_split_strings(c["reason_len"], c["reason_bytes"])),
        errors=tuple(_split_strings(c["error_len"], c["error_bytes"])),
        chunk_counts=c["chunk_count"],
        chunk_token_counts=c["chunk_tokens_count"],
        text_lengths=c["text_len"],
        text_hashes=tuple(raw_hashes[i * TEXT_HASH_BYTES : (i + 1) * TEXT_HASH_BYTES] for i in range(count)),
    )


def decode_texts(heads: RequestHeads, blob: bytes) -> tuple[str, ...]:
    """The output texts of a cell (its text blob, split by the head's lengths)."""
    return tuple(t or "" for t in _split_strings(heads.text_lengths, unpack(blob)["text_bytes"]))


def decode_requests(head: bytes, chunks: bytes, text: bytes) -> tuple[RequestRecord, ...]:
    """The records `encode_requests` was given, equal field by field."""
    heads = decode_heads(head)
    columns = unpack(chunks)
    texts = decode_texts(heads, text)
    counts = heads.chunk_counts
    ends = np.cumsum(counts)
    deltas = columns["chunk_delta"]
    # Per request, chunk times are a running sum from its send: one cumsum over the cell, then each
    # request's slice shifted by the sum of everything before it.
    running = np.cumsum(deltas)
    starts = ends - counts
    offsets = np.where(starts > 0, running[np.maximum(starts - 1, 0)] if running.size else 0, 0)
    token_counts = heads.chunk_token_counts.tolist()
    token_values = columns["chunk_tokens"].tolist()
    token_at = 0
    send = heads.send_ns.tolist()
    chunk_ns: list[tuple[int, ...]] = []
    chunk_tokens: list[tuple[int, ...] | None] = []
    for i in range(len(heads)):
        lo, hi = int(starts[i]), int(ends[i])
        chunk_ns.append(tuple((running[lo:hi] - offsets[i] + send[i]).tolist()) if hi > lo else ())
        n_tokens = token_counts[i]
        if n_tokens == _MISSING:
            chunk_tokens.append(None)
            continue
        chunk_tokens.append(tuple(token_values[token_at : token_at + n_tokens]))
        token_at += n_tokens
    return heads.records(chunk_ns, chunk_tokens, texts)


__all__ = [
    "BLOB_FORMAT",
    "EncodedCell",
    "RequestHeads",
    "decode_heads",
    "decode_requests",
    "decode_texts",
    "encode_requests",
    "heads_of",
    "pack",
    "text_hash",
    "unpack",
]
