"""The soak: a real multi-process Airflow on PostgreSQL runs a federated load over simulated clusters
while faults are injected on a schedule; an auditor then reads the clusters' own records.

``python -m soak --profile full --executor local`` (``make soak`` runs both executors, ``make soak-ci``
the CI-sized profile). Rooms: ``services`` (PostgreSQL, Redis), ``deployment`` (Airflow processes and its
REST API), ``load`` (profiles, the simulated federation, the task manifest), ``faults`` (the schedule and
its injector), ``audit`` (the reusable auditor), ``run`` (the driver).
"""
