"""The calibrated twin: predict a target's throughput, cost and run time before anything is rented.

The emulator's roofline (serving/emulator/roofline.py) times efficiencies fitted on public MLPerf
results (calibration.csv), with an error measured on rows the fit never saw; see docs/architecture.md.
"""
