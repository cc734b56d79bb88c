"""Targets that span nodes (all-or-nothing provisioning, role-by-role readiness) and the
per-cloud node limit every target's nodes count against.
"""
