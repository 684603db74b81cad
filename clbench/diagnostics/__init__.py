"""Diagnostics of memory systems beyond the benchmark's score (docs/memory-diagnostics.md):
context decay (`context_decay`), aging cards (`aging`), ACC's measures (`acc_measures`) and the
difficulty of fresh worlds (`worlds`)."""
