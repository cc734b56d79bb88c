"""The calibrated twin of a target: the emulator's roofline (twin/roofline.py) at efficiencies
fitted on public MLPerf results (calibration.csv), with an error measured on rows the fit never saw; see
docs/architecture.md. What predicts a whole plan or scores a run with it is ``bakeoff.prediction``.
"""
