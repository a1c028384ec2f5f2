"""Retrieval quality benchmark (`scripts/bench quality`): sets, systems, metrics, report."""
