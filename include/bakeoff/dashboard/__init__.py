"""The dashboard behind the Airflow UI plugin: Runs, Trend, Compare and Explore across stored runs.

``summary`` condenses a run into the manifest's ``dashboard`` document when it is published;
``pages`` reads every plan's index of manifests, validates URL filters against what is stored and
shapes each page's rows and chart series; ``render`` turns those into HTML (jinja2, autoescaped)
whose charts are drawn by the vendored Chart.js under ``static/``. The plugin only routes.
Light imports: nothing here but ``summary`` loads pandas.
"""
