"""Workloads: what prompts a cell sends (built-in mixes and user JSONL files)."""

from specfrontier.workloads.builtin import BUILTIN_MIXES, load_prompts, parse_prompts

__all__ = ["BUILTIN_MIXES", "load_prompts", "parse_prompts"]
