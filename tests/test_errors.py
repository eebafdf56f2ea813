"""One failure vocabulary (issue 28 item 3): every error the provider raises derives from
``FedschedError`` through its permanent or temporary branch, and keeps the base its callers catch.

The provider's modules are imported and every exception class they define is looked at; the dev tools
(``sim/``, ``testbed/``, ``replay/``, the demo) are not the provider's runtime and are left out.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from airflow.sdk.exceptions import AirflowException

import airflow_provider_fedsched as package
from airflow_provider_fedsched.federation._errors import FedschedError, PermanentError, TemporaryError

DEV_TOOLS = {"sim", "testbed", "replay", "demo"}

CONTROL_FLOW = {
    "airflow_provider_fedsched.operators.try_states.ClusterLeft",
    "airflow_provider_fedsched.operators.try_states.Judged",
}
"""Not errors: the transitions of a try that cross calls (operators/try_states.py). A handler of
``TemporaryError`` must not take them."""


def provider_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        if module.name.split(".")[1] in DEV_TOOLS or module.name.endswith(".__main__"):
            continue  # a __main__ runs its command when imported
        for name, value in vars(importlib.import_module(module.name)).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.name
            ):
                found[f"{module.name}.{name}"] = value
    return found


def test_every_error_of_the_provider_has_the_root_and_one_branch() -> None:
    found = provider_exceptions()
    assert set(found) >= CONTROL_FLOW, "the control-flow exceptions moved: update CONTROL_FLOW"
    rootless = [
        name for name, cls in found.items() if name not in CONTROL_FLOW and not issubclass(cls, FedschedError)
    ]
    assert rootless == [], f"exception classes without FedschedError as a base: {rootless}"
    both = [
        name
        for name, cls in found.items()
        if issubclass(cls, PermanentError) and issubclass(cls, TemporaryError)
    ]
    assert both == []
    branchless = [
        name
        for name, cls in found.items()
        if issubclass(cls, FedschedError)
        and cls not in (FedschedError, PermanentError, TemporaryError)
        and not issubclass(cls, PermanentError | TemporaryError)
    ]
    assert branchless == [], f"errors neither permanent nor temporary: {branchless}"
    assert not any(issubclass(found[name], FedschedError) for name in CONTROL_FLOW)


@pytest.mark.parametrize(
    ("dotted", "branch", "kept"),
    [
        ("federation.spec.SpecError", PermanentError, ValueError),
        ("federation.resources.QuantityError", PermanentError, ValueError),
        ("operators.arguments.FederationError", PermanentError, AirflowException),
        ("kube.access.ClusterAccessError", PermanentError, ValueError),
        ("kube.access.MissingConnection", PermanentError, ValueError),
        ("kube.access.MalformedConnection", PermanentError, ValueError),
        ("cli._common.UsageError", PermanentError, Exception),
        ("validation.http.QueryError", PermanentError, ValueError),
        ("plugins.usage.BadParameter", PermanentError, ValueError),
        ("plugins.history.UnreadableRecord", PermanentError, ValueError),
        ("triggers.events.UnreadableEvent", PermanentError, ValueError),
        ("kube.pods.ClusterLost", TemporaryError, Exception),
        ("kube.pods.PodNotDeleted", TemporaryError, Exception),
        ("kube.ledger.LedgerUnavailable", TemporaryError, Exception),
    ],
)
def test_each_error_keeps_its_base_and_has_its_branch(
    dotted: str, branch: type[FedschedError], kept: type[BaseException]
) -> None:
    module, _, name = f"{package.__name__}.{dotted}".rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, branch) and issubclass(cls, kept)


def test_the_root_is_pure() -> None:
    """``federation/`` raises it, so its module imports nothing of Airflow (nor anything at all)."""
    source = inspect.getsource(importlib.import_module(f"{package.__name__}.federation._errors"))
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert imports == ["from __future__ import annotations"]
