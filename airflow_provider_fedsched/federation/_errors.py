"""The root of the provider's errors, and the one error type of the domain core's input checks.

Every error the provider raises derives from :class:`FedschedError`, through one of two branches (as
Kopf's ``PermanentError`` and ``TemporaryError``):

* :class:`PermanentError`: trying again cannot help until a person changes something (a spec, an
  argument, a connection, a request above what a cluster can ever hold). The message names the field,
  option, connection or cluster at fault.
* :class:`TemporaryError`: the world may answer differently later (a cluster that does not answer, a
  ledger that cannot be written now, a delete not yet accepted).

The root lives in the pure core (no Airflow import) so that ``federation/`` raises it too; the classes
of the other layers keep the bases their callers catch (``FederationError`` is an ``AirflowException``,
``SpecError`` a ``ValueError``) and add a branch of this root. What a cluster did to a pod is not an
error but a :class:`~airflow_provider_fedsched.kube.failures.ClusterFailure` (built only in
``kube/failures.py``); what a trigger tells its operator is an event of ``triggers/events.py``.
"""

from __future__ import annotations

__all__ = ["FedschedError", "PermanentError", "SpecError", "TemporaryError"]


class FedschedError(Exception):
    """The root of every error the provider raises."""


class PermanentError(FedschedError):
    """Trying again cannot help: the input (spec, argument, connection, request) must change first."""


class TemporaryError(FedschedError):
    """The same step may succeed later: a cluster, ledger or store did not answer, or not yet."""


class SpecError(PermanentError, ValueError):
    """Invalid federation spec, snapshot file, request or argument; the message names the field at fault."""
