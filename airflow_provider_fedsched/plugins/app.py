"""The FastAPI app mounted by the Federation plugin at ``/fedsched`` in the Airflow API server.

Every route, the page and its static files included, requires an authenticated Airflow user (a Bearer
token or the UI's JWT cookie, which the UI's iframe sends because it is on the same origin). The
placement history is further limited to the DAGs the user may read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import FileResponse, HTMLResponse
from sqlalchemy.orm import Session

from airflow_provider_fedsched.plugins import history
from airflow_provider_fedsched.validation.http import MAX_MAP_INDEX, MAX_OFFSET, MAX_TRY_NUMBER

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
STATIC_FILES = {
    "federation.css": "text/css; charset=utf-8",
    "federation.js": "text/javascript; charset=utf-8",
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


def create_app() -> FastAPI:
    # Imported here, not at module level: Airflow imports plugins in every process (scheduler, workers).
    from airflow.api_fastapi.core_api.security import get_user, requires_authenticated

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

    app = FastAPI(
        title="Federation",
        description="Where federated pod tasks ran and why; member clusters of the federation.",
        dependencies=[Depends(requires_authenticated())],
        # The API server's own docs live at /docs; keep this app's out of the way (and authenticated).
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # served below, as a route of its own, so that it needs a user like every route
    )

    @app.get("/api/openapi.json", include_in_schema=False)
    def openapi() -> dict[str, Any]:
        return app.openapi()

    app.state.readable_dag_ids = readable_dag_ids  # for dependency overrides in tests

    @app.get("/ui", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        html = (STATIC_DIR / "federation.html").read_text(encoding="utf-8")
        return HTMLResponse(html, headers={"Cache-Control": "no-store"})

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> FileResponse:
        media_type = STATIC_FILES.get(name)
        if media_type is None:
            raise HTTPException(status_code=404, detail="not found")
        return FileResponse(STATIC_DIR / name, media_type=media_type)

    @app.get("/api/clusters")
    def clusters() -> dict[str, Any]:
        """Every member cluster: capacity from the latest snapshot, cooldown and recent history."""
        now = datetime.now(UTC)
        try:
            hook = _federation_hook()
            rows = history.cluster_overview(hook, now)
            federation = hook.spec.name
        except Exception as exc:  # no spec configured, unreadable spec: the page says why
            log.warning("Federation page: cannot read the federation: %s", exc)
            return {
                "federation": None,
                "error": f"{type(exc).__name__}: {exc}",
                "now": now.isoformat(),
                "clusters": [],
            }
        return {"federation": federation, "error": None, "now": now.isoformat(), "clusters": rows}

    @app.get("/api/placements")
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
            "placements": history.list_placements(session, flt, limit, offset, ui_root=_ui_root()),
        }

    @app.get("/api/placements/{dag_id}/{run_id}/{task_id}")
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

    return app


app = create_app()
