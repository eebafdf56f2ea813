"""Validation boundaries of the run-time surfaces: operator arguments, kubeconfigs, stored values, HTTP
query parameters. Pure (no Airflow, no network), built on the limits of ``federation/limits.py``; the
operator, the hook, kube access and the UI call these at their edges (docs/reliability.md, "Limits and bad
input"). Each check raises ``SpecError`` (or ``QueryError`` for HTTP) naming the field, argument, key or
parameter at fault and saying what is allowed.

Import the submodule you need (``validation.kubeconfig``, ``validation.operator``, ``validation.stored``,
``validation.http``): each loads only what it uses.
"""
