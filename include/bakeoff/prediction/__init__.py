"""A plan's predicted run and measured runs held against it: the calibrated twin's figures (bakeoff.twin)
priced by the budget, before anything is rented (``bakeoff predict``, the trigger form's predicted
spend), and after a run, its measured points beside the prediction and folded into a refit.

Above the budget (spend) it prices with; the twin below stays what the emulator and the budget read.
"""
