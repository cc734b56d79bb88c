"""The run: its steps as plain functions (``pipeline``), their one declared order (``steps``), the
one admission and the gate before a scheduled run.
"""
