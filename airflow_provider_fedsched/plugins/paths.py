"""Where the Federation page lives in the API server, and links into it (for the operator's extra link)."""

from __future__ import annotations

from urllib.parse import urlencode

URL_PREFIX = "/fedsched"


def decision_path(
    dag_id: str, run_id: str, task_id: str, map_index: int = -1, try_number: int | None = None, root: str = ""
) -> str:
    """The page opened on one try's decision detail. In the query string, not the fragment, so that it
    survives the way through Airflow's login (a browser never sends the fragment)."""
    params: dict[str, str | int] = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id}
    if map_index >= 0:
        params["map_index"] = map_index
    if try_number is not None:
        params["try_number"] = try_number
    return f"{root.rstrip('/')}{URL_PREFIX}/ui?{urlencode(params)}#placements"
