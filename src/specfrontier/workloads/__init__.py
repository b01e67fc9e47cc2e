"""Workloads: what prompts a cell sends and how they are sampled.

Built-in mixes and user JSONL files (`builtin`), real prompt sets read offline from registry packages
(`sources`), the seed's synthetic best case (`synthetic`), sampling profiles (`sampling`), and the
resolution of a config's `workloads:` entry into prompts (`resolve`).
"""

from specfrontier.workloads.builtin import BUILTIN_MIXES, load_prompts, parse_prompts

__all__ = ["BUILTIN_MIXES", "load_prompts", "parse_prompts"]
