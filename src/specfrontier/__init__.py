"""specfrontier: find the best speculative-decoding settings for a real LLM inference server.

The public surface is small on purpose: `tune` runs a sweep from a config, the store keeps every
finished cell, and `analysis`/`report` turn the store into tables and recommendations.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
