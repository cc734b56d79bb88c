"""Vendored serving recipes (data only): see bakeoff.plan.recipes for the loader."""
