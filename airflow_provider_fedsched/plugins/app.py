"""The FastAPI app mounted by the Federation plugin at ``/fedsched`` in the Airflow API server.

Every route requires an authenticated Airflow user (a Bearer token or the UI's JWT cookie, which the UI's
iframe sends because it is on the same origin): the JSON API and the static files answer 401/403 without
one, the page itself redirects a signed-out browser to Airflow's login (which comes back to it). The
placement history is further limited to the DAGs the user may read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

import airflow_provider_fedsched.plugins.history as history
import airflow_provider_fedsched.plugins.usage as usage
from airflow_provider_fedsched.federation.costs import REPORT_GROUPS
from airflow_provider_fedsched.plugins.paths import URL_PREFIX
from airflow_provider_fedsched.state.stores import HISTORY_LIMIT
from airflow_provider_fedsched.validation.http import MAX_ID_LENGTH, MAX_MAP_INDEX, MAX_OFFSET, MAX_TRY_NUMBER

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
STATIC_FILES = {
    "federation.css": "text/css; charset=utf-8",
    "federation.js": "text/javascript; charset=utf-8",
    "charts.js": "text/javascript; charset=utf-8",
}
"""The only files served from ``static/`` (an allow-list, so no path ever reaches the file system)."""


def _session() -> Iterator[Session]:
    from airflow.utils.session import create_session

    with create_session(scoped=False) as session:
        yield session


SessionDep = Annotated[Session, Depends(_session)]


def _ui_root() -> str:
    """The UI's path prefix (``[api] base_url``), for links to task instances."""
    from airflow.api_fastapi.app import API_ROOT_PATH

    return (API_ROOT_PATH or "/").rstrip("/")


def _federation_hook() -> Any:
    from airflow_provider_fedsched.hooks.federation import FederationHook

    return FederationHook()


def _from_federation(key: str, read: Callable[[Any, datetime], Any]) -> dict[str, Any]:
    """``{federation, error, now, <key>: read(hook, now)}``; a federation that cannot be read (no spec
    configured, an unreadable spec) gives an empty list and the reason, for the page to show. A bad query
    parameter (:class:`usage.BadParameter`) is a 422 naming it. Malformed stored entries never get here
    (the stores skip them, naming their keys in the log); anything else unexpected is logged with its
    traceback and the page says only where to look: exception text is not for the browser."""
    from airflow_provider_fedsched.federation.spec import SpecError

    now = datetime.now(UTC)
    try:
        hook = _federation_hook()
        rows = read(hook, now)
        federation = hook.spec.name
    except usage.BadParameter as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
    except SpecError as exc:
        log.warning("Federation page: cannot read the federation's %s: %s", key, exc)
        return {"federation": None, "error": str(exc), "now": now.isoformat(), key: []}
    except Exception:
        log.exception("Federation page: cannot read the federation's %s", key)
        error = f"the federation's {key} could not be read (the API server's log says why)"
        return {"federation": None, "error": error, "now": now.isoformat(), key: []}
    return {"federation": federation, "error": None, "now": now.isoformat(), key: rows}


def create_app() -> FastAPI:
    # Imported here, not at module level: Airflow imports plugins in every process (scheduler, workers).
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user, requires_authenticated

    def readable_dag_ids(user: Any = Depends(get_user)) -> frozenset[str] | None:  # noqa: B008
        """DAG ids the current user may read, from the auth manager (None when it cannot say)."""
        from airflow.api_fastapi.app import get_auth_manager

        try:
            return frozenset(get_auth_manager().get_authorized_dag_ids(user=user, method="GET"))
        except Exception:  # an auth manager without DAG-level rules: authentication already happened
            log.debug("Could not list readable DAGs", exc_info=True)
            return None

    # Defaults, not Annotated aliases: with postponed annotations FastAPI resolves names in module globals.
    readable_dags_dep = Depends(readable_dag_ids)

    async def signed_in(request: Request, bearer: Any = Depends(bearer_scheme)) -> bool:  # noqa: B008
        """Whether the request carries a valid user, as ``get_user`` decides (never raises)."""
        try:
            await get_user(request, _oauth_token=None, bearer_credentials=bearer)
        except HTTPException:
            return False
        return True

    signed_in_dep = Depends(signed_in)

    app = FastAPI(
        title="Federation",
        description="Where federated pod tasks ran and why; member clusters, tenants and costs.",
        # The API server's own docs live at /docs; keep this app's out of the way (and authenticated).
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # served below, as a route of its own, so that it needs a user like every route
    )
    app.state.readable_dag_ids = readable_dag_ids  # for dependency overrides in tests
    app.state.signed_in = signed_in

    @app.get("/ui", response_class=HTMLResponse, include_in_schema=False)
    def page(request: Request, user: bool = signed_in_dep) -> Response:
        if not user:  # a browser signed out: Airflow's login, then back here (the query string kept)
            from airflow.api_fastapi.app import get_auth_manager

            back = f"{_ui_root()}{URL_PREFIX}/ui" + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(get_auth_manager().get_url_login(next_url=back), status_code=307)
        html = (STATIC_DIR / "federation.html").read_text(encoding="utf-8")
        return HTMLResponse(html, headers={"Cache-Control": "no-store"})

    api = APIRouter(dependencies=[Depends(requires_authenticated())])

    @api.get("/api/openapi.json", include_in_schema=False)
    def openapi() -> dict[str, Any]:
        return app.openapi()

    @api.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> FileResponse:
        media_type = STATIC_FILES.get(name)
        if media_type is None:
            raise HTTPException(status_code=404, detail="not found")
        return FileResponse(STATIC_DIR / name, media_type=media_type)

    @api.get("/api/clusters")
    def clusters() -> dict[str, Any]:
        """Every member cluster: capacity from the latest snapshot, cooldown and recent history."""
        return _from_federation("clusters", history.cluster_overview)

    @api.get("/api/placements")
    def placements(
        session: SessionDep,
        dag_id: str | None = None,
        run_id: str | None = None,
        task_id: str | None = None,
        cluster: str | None = None,
        outcome: Annotated[
            str | None, Query(description=f"one of {', '.join(history.OUTCOME_FILTERS)}")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=history.MAX_PAGE_SIZE)] = history.DEFAULT_PAGE_SIZE,
        offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
        readable_dags: frozenset[str] | None = readable_dags_dep,
    ) -> dict[str, Any]:
        """One row per recorded task try, newest first."""
        if outcome and outcome not in history.OUTCOME_FILTERS:
            raise HTTPException(
                status_code=422, detail=f"outcome must be one of {', '.join(history.OUTCOME_FILTERS)}"
            )
        flt = history.PlacementFilter(
            dag_id=dag_id or None,
            run_id=run_id or None,
            task_id=task_id or None,
            cluster=cluster or None,
            outcome=outcome or None,
            dag_ids=readable_dags,
        )
        return {
            "total": history.count_placements(session, flt),
            "limit": limit,
            "offset": offset,
            "large_egress_gb": history.LARGE_EGRESS_GB,
            "placements": history.list_placements(session, flt, limit, offset, ui_root=_ui_root()),
        }

    @api.get("/api/placements/{dag_id}/{run_id}/{task_id}")
    def placement(
        session: SessionDep,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: Annotated[int, Query(ge=-1, le=MAX_MAP_INDEX)] = -1,
        try_number: Annotated[int | None, Query(ge=0, le=MAX_TRY_NUMBER)] = None,
        readable_dags: frozenset[str] | None = readable_dags_dep,
    ) -> dict[str, Any]:
        """The full record of one try with every decision (candidates, score breakdown, rejections)."""
        if readable_dags is not None and dag_id not in readable_dags:
            raise HTTPException(status_code=404, detail="no placement record for this task instance")
        try:
            value, recorded_at = history.get_placement_value(session, dag_id, run_id, task_id, map_index)
        except KeyError:
            raise HTTPException(
                status_code=404, detail="no placement record for this task instance"
            ) from None
        detail = history.placement_detail(
            value,
            dag_id=dag_id,
            run_id=run_id,
            task_id=task_id,
            map_index=map_index,
            recorded_at=recorded_at,
            ui_root=_ui_root(),
        )
        if try_number is not None and detail["readable"] and detail["try_number"] != try_number:
            # Airflow clears a task's XComs when it runs again: only the latest try's record exists.
            raise HTTPException(
                status_code=404,
                detail=f"only the latest try's record is kept (try {detail['try_number']})",
            )
        return detail

    @api.get("/api/tenants")
    def tenants() -> dict[str, Any]:
        """Per tenant: quota, use, borrowed, waiting tasks and cost this period (``fedsched tenants``)."""
        return _from_federation("tenants", lambda hook, now: hook.tenants(now))

    @api.get("/api/costs")
    def costs(
        by: Annotated[str, Query(description=f"one of {', '.join(REPORT_GROUPS)}")] = "day",
        split: Annotated[
            str | None, Query(description="a second group: one report per value (e.g. tenant)")
        ] = None,
        days: Annotated[int, Query(ge=1, le=usage.MAX_COST_DAYS)] = usage.DEFAULT_COST_DAYS,
    ) -> dict[str, Any]:
        """Estimated cost and egress of the cluster attempts of the last ``days`` days (``fedsched cost``)."""
        report = _from_federation(
            "rows", lambda hook, now: usage.costs(hook, now, by=by, split=split or None, days=days)
        )
        return {**report, **report["rows"]} if report["error"] is None else report

    @api.get("/api/utilization")
    def utilization(
        cluster: str | None = None,
        limit: Annotated[int, Query(ge=1, le=HISTORY_LIMIT)] = HISTORY_LIMIT,
    ) -> dict[str, Any]:
        """Utilization over time per member cluster: the samples each snapshot left in shared state."""
        return _from_federation("clusters", lambda hook, now: usage.utilization(hook, cluster or None, limit))

    @api.get("/api/waits")
    def waits(
        days: Annotated[int, Query(ge=1, le=usage.MAX_COST_DAYS)] = usage.DEFAULT_COST_DAYS,
    ) -> dict[str, Any]:
        """How long tries waited for their first placement, per wait-time bucket and tenant."""
        report = _from_federation("series", lambda hook, now: usage.waits(hook, now, days))
        return {**report, **report["series"]} if report["error"] is None else report

    @api.get("/api/audit")
    def audit(
        session: SessionDep,
        since: Annotated[datetime | None, Query(description="tries started at or after (ISO 8601)")] = None,
        until: Annotated[datetime | None, Query(description="tries started before (ISO 8601)")] = None,
        dataset: Annotated[str | None, Query(max_length=MAX_ID_LENGTH)] = None,
        download: bool = False,
        readable_dags: frozenset[str] | None = readable_dags_dep,
    ) -> Response:
        """The sovereignty audit (``fedsched audit --json``) of the DAGs the user may read, in the exported
        form ``fedsched audit verify`` checks; ``download`` serves it as a file."""
        from airflow_provider_fedsched.federation.audit import check_dataset, dump_report
        from airflow_provider_fedsched.federation.limits import check_time
        from airflow_provider_fedsched.federation.spec import SpecError

        try:
            since = check_time(since, "since") if since is not None else None
            until = check_time(until, "until") if until is not None else None
        except SpecError as exc:
            raise HTTPException(status_code=422, detail=str(exc)) from None
        if since is not None and until is not None and until <= since:
            raise HTTPException(status_code=422, detail="until: not after since")

        def report(hook: Any, now: datetime) -> Any:
            if dataset:
                try:
                    check_dataset(hook.spec, dataset, "dataset")
                except SpecError as exc:
                    raise usage.BadParameter("dataset", str(exc).removeprefix("dataset: ")) from None
            return history.audit_report(
                session,
                hook,
                now=now,
                since=since,
                until=until,
                dataset=dataset or None,
                dag_ids=readable_dags,
            )

        found = _from_federation("report", report)
        if found["error"] is not None:
            return JSONResponse(found)
        document = found["report"]
        headers = {"Cache-Control": "no-store"}
        if download:
            stamp = document["header"]["generated_at"][:19].replace(":", "")
            headers["Content-Disposition"] = (
                f'attachment; filename="audit-{document["header"]["federation"]}-{stamp}.json"'
            )
        return Response(dump_report(document), media_type="application/json", headers=headers)

    app.include_router(api)
    return app


app = create_app()
