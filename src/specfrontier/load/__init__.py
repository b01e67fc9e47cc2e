"""Load generation: the streaming HTTP client and the load patterns that drive it.

- `sse`: incremental Server-Sent Events parser fed with raw network reads.
- `client`: `StreamingClient`, one streamed OpenAI-compatible request -> one `RequestRecord`, with one
  clock reading per network read and server failures recorded instead of raised.
- `closed_loop`: `run_closed_loop`, a fixed number of requests in flight until N have been sent.
"""

from specfrontier.load.client import StreamingClient, build_request_body
from specfrontier.load.closed_loop import run_closed_loop
from specfrontier.load.sse import DONE_SENTINEL, SSEEvent, SSEParser

__all__ = [
    "DONE_SENTINEL",
    "SSEEvent",
    "SSEParser",
    "StreamingClient",
    "build_request_body",
    "run_closed_loop",
]
