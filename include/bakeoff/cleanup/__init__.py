"""Teardown that one failure cannot block, and the hourly reaper behind it."""
