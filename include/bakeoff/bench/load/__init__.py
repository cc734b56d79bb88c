"""How hard: load generation (requests and sessions), the one measurement loop per point, the
SLA search, capacity at SLO tiers and the client's own calibration.
"""
