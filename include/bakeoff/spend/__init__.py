"""Spend before anything runs: the budget guard, approval before spend, the offers a target may
launch as, and cost at the SLO (one definition for predicted and measured).
"""
