"""What the benchmark sends and how: workloads and prompts sized in the model's tokens, the
streaming transport and its SSE accounting, and the client watching itself.
"""
