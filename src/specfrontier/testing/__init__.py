"""Helpers for tests and examples that ship with the package: the synthetic target/draft GGUF pair."""
