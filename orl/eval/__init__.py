"""Evaluation: verifiable synthetic tasks for tiny character-level dLLMs."""
