"""Runnable examples: the offload implementation, a small GPT and the example command."""
