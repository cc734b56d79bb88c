"""bakeoff: honest head-to-head evaluations of AI inference hardware, with cost per token.

The domain library the Airflow DAGs call; see the README for its layout."""
