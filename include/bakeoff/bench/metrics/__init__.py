"""The request and point tables, the metric declarations and each point's summary, the
bootstrap statistics, what the server counted and what it says about itself.
"""
