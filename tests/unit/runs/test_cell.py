"""Cell pieces that need no server (`runs.cell`): a window's timestamps stretched to the server's time."""

from __future__ import annotations

from specfrontier.records import RequestRecord
from specfrontier.runs.cell import to_server_time


def test_to_server_time_stretches_every_timestamp_from_the_window_start() -> None:
    record = RequestRecord("p", send_ns=1000, end_ns=1600, first_token_ns=1100, chunk_ns=(1100, 1300))
    other = RequestRecord("q", send_ns=1200, end_ns=1400, first_token_ns=None)
    scaled = to_server_time([record, other], 10.0)
    assert (scaled[0].send_ns, scaled[0].first_token_ns, scaled[0].end_ns) == (1000, 2000, 7000)
    assert scaled[0].chunk_ns == (2000, 4000)
    assert (scaled[1].send_ns, scaled[1].end_ns, scaled[1].first_token_ns) == (3000, 5000, None)
    assert to_server_time([record], 1.0) == [record]
