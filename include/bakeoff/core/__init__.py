"""Shared value types that import nothing of the project: the bottom layer every package may import.

A type lives here when packages of different ranks both need it (a target's launch spec, an instance, an
endpoint, a step's facts); keeping this package free of project imports is what lets every other rank
import it without closing a cycle.
"""
