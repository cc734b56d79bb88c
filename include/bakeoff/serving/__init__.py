"""Serving stacks: from a target to a running OpenAI-compatible endpoint."""
