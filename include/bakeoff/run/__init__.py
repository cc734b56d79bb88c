"""The run: its steps as plain functions (the nodes brought up in ``provisioning``, taken down in
``teardown_steps``, the rest in ``pipeline``), their one declared order (``steps``), the one admission
and the gate before a scheduled run.
"""
