"""One point spread over client processes (``workers``) and over members that share no clock
(``members``, on Celery workers in ``fleet_celery``).
"""
