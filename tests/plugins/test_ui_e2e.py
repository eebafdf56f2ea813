"""End to end: a real Airflow (API server, scheduler, DAG processor; SQLite, LocalExecutor, SimpleAuthManager)
runs the demo DAG against the simulated federation; the Federation API and page show where each task ran,
including the nightly_etl quota failover, and refuse anonymous requests. Screenshots go to a temporary
directory, or refresh ``docs/images`` when ``FEDSCHED_REFRESH_SCREENSHOTS=1`` (so ``make test`` leaves the
tree clean).

About two minutes on two cores, most of it Airflow starting up and the tasks' processes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_fedsched.plugins.paths import decision_path
from tests.plugins.browser import Browser, ensure_chromium

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]
DOCS_IMAGES = REPO / "docs" / "images"
REFRESH_SCREENSHOTS = "FEDSCHED_REFRESH_SCREENSHOTS"
"""Set to 1 to write the page's screenshots into docs/images rather than a temporary directory."""


def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get(REFRESH_SCREENSHOTS) == "1":
        return DOCS_IMAGES
    return tmp_path_factory.mktemp("screenshots")


DAG_ID = "example_federated"
TASKS = {
    "train_model",
    "eu_customer_report",
    "clickstream_rollup",
    "nightly_etl",
    "resumable_backfill",
    "train_bert",
}
ADMIN = ("admin", "admin")
TENANTS = [
    {
        "name": "team-data",
        "quota": {"cpu": "200", "memory": "1Ti", "nvidia.com/gpu": 16, "pods": 100},
        "weight": 1,
        "budget": {"period": "month", "max_cost": 1000},
    },
    {"name": "team-ml", "quota": {"nvidia.com/gpu": 8}, "weight": 3, "reclaimable": True},
]
DASHBOARD = "https://dashboard.example/{cluster}/namespaces/{namespace}/pods/{pod}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Api:
    def __init__(self, base: str) -> None:
        self.base = base
        self.token: str | None = None

    def request(
        self, method: str, path: str, body: Any = None, token: str | bool | None = True
    ) -> tuple[int, Any]:
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        bearer = self.token if token is True else token
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return 0, None
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def get(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        return self.request("GET", path, **kwargs)


def wait_for(what: str, check: Any, timeout: float, processes: list[subprocess.Popen[bytes]]) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        for process in processes:
            if process.poll() is not None:
                raise AssertionError(
                    f"{what}: `{' '.join(map(str, process.args))}` exited ({process.returncode})"
                )
        time.sleep(1.0)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@pytest.fixture(scope="module")
def airflow_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The simulated federation plus a running Airflow that has run the demo DAG once."""
    from airflow_provider_fedsched.demo import (
        airflow_env,
        prepare_etl_namespace,
        take_remaining_etl_quota,
        take_snapshot,
    )
    from airflow_provider_fedsched.sim import SimFederation

    root = tmp_path_factory.mktemp("e2e")
    home = root / "airflow"
    home.mkdir()
    logs = root / "logs"
    logs.mkdir()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    # Only the demo DAG: other example DAGs (scheduled ones) would compete for the executor.
    dags = home / "dags"
    dags.mkdir()
    (dags / "example_federated_dag.py").symlink_to(REPO / "example_dags" / "example_federated_dag.py")
    (home / "passwords.json").write_text(json.dumps({ADMIN[0]: ADMIN[1]}))
    started = time.monotonic()
    with SimFederation(state_dir=root / "sim", time_scale=0.5) as fed:
        federation = root / "sim" / "federation.yaml"
        spec = yaml.safe_load(federation.read_text())
        spec["policy"]["snapshot_ttl_seconds"] = 600  # the quota incident below stays unseen by the snapshot
        for cluster in spec["clusters"]:  # for the operator's extra link
            cluster["dashboard_url"] = DASHBOARD
        spec["tenants"] = TENANTS  # the demo's tasks all fall to the default tenant
        spec["tenant_mapping"] = {"default": "team-data"}
        federation.write_text(yaml.safe_dump(spec, sort_keys=False))
        prepare_etl_namespace(fed)
        # The demo's environment (connections, federation spec, DAG folder) in a home of our own; the test
        # session's unit-test settings must not leak in (random JWT keys per process would break the
        # scheduler's calls to the execution API).
        env = {
            k: v
            for k, v in airflow_env(fed.airflow_env_vars(), federation).items()
            if k != "AIRFLOW__CORE__UNIT_TEST_MODE"
        }
        env.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": "2",
                "AIRFLOW__CORE__AUTH_MANAGER": (
                    "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN[0]}:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base}/execution/",
                "AIRFLOW__API__BASE_URL": base,
                "AIRFLOW__API__PORT": str(port),
                "AIRFLOW__API_AUTH__JWT_SECRET": "fedsched-e2e-jwt-secret-0123456789abcdef",
                "AIRFLOW__API__SECRET_KEY": "fedsched-e2e-secret",
                "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            }
        )
        airflow = str(Path(sys.executable).with_name("airflow"))

        def run(*args: str) -> None:
            with (logs / "setup.log").open("a") as out:
                subprocess.run(
                    [*args], env=env, stdout=out, stderr=subprocess.STDOUT, check=True, timeout=300
                )

        run(airflow, "db", "migrate")
        assert take_snapshot(env).returncode == 0
        take_remaining_etl_quota(fed)  # the demo's quota incident, after the snapshot
        processes: list[subprocess.Popen[bytes]] = []
        try:
            for command in (
                ["api-server", "--port", str(port), "--host", "127.0.0.1"],
                ["scheduler"],
                ["dag-processor"],
            ):
                out = (logs / f"{command[0]}.log").open("wb")
                processes.append(
                    subprocess.Popen([airflow, *command], env=env, stdout=out, stderr=subprocess.STDOUT)
                )
            api = Api(base)
            wait_for(
                "the API server",
                lambda: api.get("/api/v2/monitor/health", token=False)[0] == 200,
                120,
                processes,
            )
            # The execution API (Cadwyn) builds its versioned routes on its first request, in the API
            # server's event loop: 4 s of CPU, a minute on a loaded 2-core machine, during which the
            # server answers nothing. Were that first request a task's start (5 s timeout, 5 tries), the
            # task would fail before it ran. The deployment is ready once the execution API answers.
            wait_for(
                "the execution API",
                lambda: api.get("/execution/health", token=False)[0] == 200,
                120,
                processes,
            )
            status, body = api.request(
                "POST", "/auth/token", {"username": ADMIN[0], "password": ADMIN[1]}, token=False
            )
            assert status == 201, body
            api.token = body["access_token"]
            wait_for(
                "the DAG to be parsed", lambda: api.get(f"/api/v2/dags/{DAG_ID}")[0] == 200, 120, processes
            )
            status, body = api.request("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
            assert status == 200, body
            status, run_body = api.request("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None})
            assert status == 200, run_body
            run_id = run_body["dag_run_id"]

            def finished() -> Any:
                status, body = api.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{urllib.parse.quote(run_id, safe='')}")
                return body if status == 200 and body["state"] in ("success", "failed") else None

            final = wait_for("the DAG run to finish", finished, 240, processes)
            # One more snapshot after the run, so that utilization over time has a second point per cluster.
            assert take_snapshot(env).returncode == 0
            yield {
                "api": api,
                "base": base,
                "run_id": run_id,
                "run_state": final["state"],
                "logs": logs,
                "clusters": sorted(fed.clusters),
                "setup_seconds": time.monotonic() - started,
            }
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()


def test_api_shows_the_run(airflow_site: dict[str, Any]) -> None:
    api: Api = airflow_site["api"]
    assert airflow_site["run_state"] == "success", f"see {airflow_site['logs']}"
    status, clusters = api.get("/fedsched/api/clusters")
    assert status == 200, clusters
    assert [c["name"] for c in clusters["clusters"]] == airflow_site["clusters"]
    assert all(c["snapshot"] and c["total"] for c in clusters["clusters"])

    query = urllib.parse.urlencode({"dag_id": DAG_ID, "run_id": airflow_site["run_id"]})
    status, page = api.get(f"/fedsched/api/placements?{query}")
    assert status == 200, page
    rows = {row["task_id"]: row for row in page["placements"]}
    assert set(rows) == TASKS and page["total"] == len(TASKS)
    assert all(row["readable"] and row["outcome"] == "succeeded" for row in rows.values())
    etl = rows["nightly_etl"]
    assert etl["failover"] and etl["attempts"][0]["cluster"] == "east-cpu"
    assert etl["attempts"][0]["outcome"] == "insufficient" and "quota" in etl["attempts"][0]["reason"]
    # Its data (user-events, 500 GB on east-cpu) moved to the cluster it ran on: a large move, marked.
    assert etl["attempts"][0]["egress_gb"] == 0.0 and etl["attempts"][0]["cost"] == 0.0
    assert etl["attempts"][-1]["egress_gb"] == 500.0 and etl["egress_gb"] == 500.0 and etl["large_egress"]
    assert etl["attempts"][-1]["egress_cost"] == pytest.approx(25.0)  # 500 GB at east-cpu's 0.05 per GB
    assert etl["attempts"][-1]["cost"] > etl["attempts"][-1]["egress_cost"]  # plus the compute
    assert not rows["clickstream_rollup"]["large_egress"]  # it ran where its 2 TB are
    assert (
        etl["task_instance_url"]
        == f"/dags/{DAG_ID}/runs/{urllib.parse.quote(airflow_site['run_id'], safe='')}/tasks/nightly_etl"
    )

    path = (
        f"/fedsched/api/placements/{DAG_ID}/{urllib.parse.quote(airflow_site['run_id'], safe='')}/nightly_etl"
    )
    status, detail = api.get(path)
    assert status == 200, detail
    assert len(detail["decisions"]) >= 2 and detail["decisions"][0]["cluster"] == "east-cpu"
    assert detail["decisions"][1]["rejected"] or detail["decisions"][1]["candidates"]


def test_the_api_server_shows_the_extra_link_to_the_cluster_the_task_ran_on(
    airflow_site: dict[str, Any],
) -> None:
    api: Api = airflow_site["api"]
    run = urllib.parse.quote(airflow_site["run_id"], safe="")
    query = urllib.parse.urlencode({"dag_id": DAG_ID, "run_id": airflow_site["run_id"]})
    status, page = api.get(f"/fedsched/api/placements?{query}")
    assert status == 200, page
    links = {}
    for row in page["placements"]:
        last = row["attempts"][-1]
        dashboard = DASHBOARD.format(cluster=last["cluster"], namespace=last["namespace"], pod=last["pod"])
        detail = decision_path(DAG_ID, airflow_site["run_id"], row["task_id"], try_number=row["try_number"])
        status, body = api.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run}/taskInstances/{row['task_id']}/links")
        assert status == 200, body
        # One "Ran on" link per member; only the cluster the try ran on has a URL (the UI shows only it).
        assert body["extra_links"] == {
            "Cluster dashboard": dashboard,
            **{
                f"Ran on {name}": detail if name == row["cluster"] else None
                for name in airflow_site["clusters"]
            },
        }, row["task_id"]
        links[row["task_id"]] = dashboard
    assert set(links) == TASKS
    # The failover task links to the cluster it ran on in the end, not to the one it left.
    assert "/east-cpu/" not in links["nightly_etl"]


def test_the_task_instance_link_is_a_ui_route(airflow_site: dict[str, Any]) -> None:
    api: Api = airflow_site["api"]
    status, page = api.get(f"/fedsched/api/placements?dag_id={DAG_ID}&limit=1")
    assert status == 200
    link = page["placements"][0]["task_instance_url"]
    request = urllib.request.Request(airflow_site["base"] + link)
    with urllib.request.urlopen(request, timeout=30) as response:  # the UI's index.html for its router
        assert response.status == 200 and '<div id="root"' in response.read().decode()


def test_tenants_costs_and_utilization_in_the_deployment(airflow_site: dict[str, Any]) -> None:
    """The Tenants view's figures are the run's own: the tenant's cost this period is the sum of the
    cost of every cluster attempt of the run, failed ones included."""
    api: Api = airflow_site["api"]
    query = urllib.parse.urlencode({"dag_id": DAG_ID, "run_id": airflow_site["run_id"]})
    status, page = api.get(f"/fedsched/api/placements?{query}")
    assert status == 200, page
    spent = sum(a["cost"] for row in page["placements"] for a in row["attempts"])
    moved = sum(row["egress_gb"] for row in page["placements"])
    assert spent > 25.0 and moved >= 500.0
    status, body = api.get("/fedsched/api/tenants")
    assert status == 200 and body["error"] is None, body
    tenants = {row["tenant"]: row for row in body["tenants"]}
    assert set(tenants) == {"team-data", "team-ml"}
    assert tenants["team-data"]["cost"] == pytest.approx(spent, abs=1e-5)
    assert tenants["team-data"]["egress_gb"] == pytest.approx(moved, abs=1e-5)
    assert tenants["team-data"]["quota"]["cpu"] == "200" and tenants["team-data"]["max_cost"] == 1000
    assert tenants["team-ml"]["cost"] == 0.0 and tenants["team-ml"]["waiting"] == 0
    status, costs = api.get("/fedsched/api/costs?by=day&split=tenant")
    assert status == 200, costs
    assert [s["tenant"] for s in costs["series"]] == ["team-data"]
    assert sum(row["cost"] for row in costs["series"][0]["rows"]) == pytest.approx(spent, abs=1e-5)
    status, utilization = api.get("/fedsched/api/utilization")
    assert status == 200, utilization
    assert [c["cluster"] for c in utilization["clusters"]] == airflow_site["clusters"]
    assert all(len(c["samples"]) >= 2 for c in utilization["clusters"])  # before and after the run
    # Every try of the run waited (or not) before its first placement: one wait sample each.
    status, waits = api.get("/fedsched/api/waits")
    assert status == 200 and waits["error"] is None, waits
    assert waits["samples"] >= len(page["placements"]) > 0
    assert "team-data" in {s["tenant"] for s in waits["series"]}
    status, body = api.get("/fedsched/api/costs?by=planet")
    assert status == 422 and body["detail"].startswith("by: "), body
    status, body = api.get("/fedsched/api/utilization?cluster=nowhere")
    assert status == 422 and body["detail"].startswith("cluster: "), body


API_PATHS = [
    "/fedsched/static/federation.js",
    "/fedsched/api/clusters",
    "/fedsched/api/placements",
    "/fedsched/api/tenants",
    "/fedsched/api/costs",
    "/fedsched/api/utilization",
    "/fedsched/api/waits",
    "/fedsched/api/audit",
]


@pytest.mark.parametrize("path", API_PATHS)
def test_anonymous_requests_are_refused(airflow_site: dict[str, Any], path: str) -> None:
    api: Api = airflow_site["api"]
    assert api.get(path, token=False)[0] in (401, 403)
    assert api.get(path, token="forged.jwt.token")[0] in (401, 403)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_the_page_signed_out_redirects_to_the_login(airflow_site: dict[str, Any]) -> None:
    opener = urllib.request.build_opener(_NoRedirect)
    for headers in ({}, {"Authorization": "Bearer forged.jwt.token"}):
        request = urllib.request.Request(airflow_site["base"] + "/fedsched/ui?task_id=x", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as raised:
            opener.open(request, timeout=30)
        assert raised.value.code == 307
        assert raised.value.headers["Location"] == "/auth/login?next=%2Ffedsched%2Fui%3Ftask_id%3Dx"


def test_plugin_is_registered(airflow_site: dict[str, Any]) -> None:
    status, plugins = airflow_site["api"].get("/api/v2/plugins")
    assert status == 200
    (ours,) = [p for p in plugins["plugins"] if p["name"] == "fedsched"]
    assert ours["external_views"][0]["url_route"] == "federation"
    assert ours["fastapi_apps"][0]["url_prefix"] == "/fedsched"


def test_page_in_chromium(airflow_site: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    images = screenshot_dir(tmp_path_factory)
    binary = ensure_chromium()
    # A browser test that cannot run is a failure, not a skip: it needs Debian's chromium (root + apt-get).
    assert binary is not None, "chromium is not installed and could not be installed with apt-get"
    base, api = airflow_site["base"], airflow_site["api"]
    with Browser(binary) as browser:
        # The UI's own JWT cookie, as after logging in: the page's fetches authenticate with it.
        browser.set_cookie(base, "_token", api.token)
        browser.open(
            f"{base}/fedsched/ui#clusters",
            ready="document.querySelectorAll('#clusters-table tbody tr[data-cluster]').length === 3",
        )
        text = browser.text()
        for name in airflow_site["clusters"]:
            assert name in text

        run = urllib.parse.quote(airflow_site["run_id"], safe="")
        browser.open(
            f"{base}/fedsched/ui#placements?dag_id={DAG_ID}&run_id={run}",
            ready=f"document.querySelectorAll('#placements-table tr[data-task]').length === {len(TASKS)}",
        )
        failover_tasks = browser.evaluate(
            "[...document.querySelectorAll('#placements-table tr.failover')].map(tr => tr.dataset.task)"
        )
        assert "nightly_etl" in failover_tasks
        assert "failed over" in browser.text()
        # Cost and egress on every row; the 500 GB move of nightly_etl stands out.
        large = browser.evaluate(
            "[...document.querySelectorAll('#placements-table tr.large-egress')].map(tr => tr.dataset.task)"
        )
        assert large == ["nightly_etl"]
        etl_cost = browser.evaluate("document.querySelector('tr[data-task=nightly_etl] td.cost').innerText")
        assert "500 GB moved" in etl_cost
        assert browser.evaluate("document.querySelectorAll('#placements-table td.cost').length") == len(TASKS)
        links = browser.evaluate(
            "[...document.querySelectorAll('a.ti-link')].map(a => a.getAttribute('href'))"
        )
        assert any(link.endswith("/tasks/nightly_etl") for link in links)
        # Decision detail of the failover row: tables, not raw JSON.
        browser.evaluate("document.querySelector('tr.failover[data-task=nightly_etl] button').click()")
        deadline = time.monotonic() + 15
        while not browser.evaluate("document.querySelectorAll('#detail table.candidates').length > 0"):
            assert time.monotonic() < deadline, "decision detail did not render"
            time.sleep(0.2)
        assert "Candidates (best first)" in browser.text()
        browser.evaluate("window.scrollTo(0, 0)")
        browser.screenshot(images / "federation-placements.png")

        # Inside the Airflow UI: the plugin route shows the page in the UI's iframe (same origin and cookie).
        in_frame = "document.querySelector('iframe')?.contentDocument?.body?.dataset.loaded === 'true'"
        try:
            browser.open(f"{base}/plugin/federation", ready=in_frame)
        finally:
            browser.screenshot(images / "federation-in-airflow-ui.png", full_page=False)
        frame_text = browser.evaluate("document.querySelector('iframe').contentDocument.body.innerText")
        assert all(name in frame_text for name in airflow_site["clusters"])


def test_the_audit_lists_the_run_s_sovereign_tries_compliant(
    airflow_site: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The API server reads the records and each member's ledger through its connection: the tries that read
    eu-customers and user-events are listed, every cluster they used is compliant, the export verifies, and
    the page's Audit tab shows them."""
    from airflow_provider_fedsched.federation.audit import dump_report, verify_report

    status, report = airflow_site["api"].get("/fedsched/api/audit")
    assert status == 200, report
    ours = [e for e in report["entries"] if e["dag_id"] == DAG_ID and e["run_id"] == airflow_site["run_id"]]
    assert {e["task_id"] for e in ours} == {"eu_customer_report", "nightly_etl"}
    assert [e["verdict"] for e in ours] == ["compliant"] * len(ours), ours
    assert set(report["header"]["ledgers"].values()) == {"read"}
    assert verify_report(dump_report(report).encode()).ok

    binary = ensure_chromium()
    assert binary is not None, "chromium is not installed and could not be installed with apt-get"
    base = airflow_site["base"]
    with Browser(binary) as browser:
        browser.set_cookie(base, "_token", airflow_site["api"].token)
        browser.open(
            f"{base}/fedsched/ui#audit",
            ready="document.querySelectorAll('#audit-table tbody tr[data-verdict]').length > 0",
        )
        verdicts = browser.evaluate(
            "[...document.querySelectorAll('#audit-table tbody tr')].map(tr => tr.dataset.verdict)"
        )
        assert verdicts and set(verdicts) == {"compliant"}, verdicts
        assert "no violation" in browser.text()
        browser.screenshot(screenshot_dir(tmp_path_factory) / "federation-audit.png")


def js_money(value: float) -> str:
    """The page's ``money()``: 2 decimals, 4 below 0.01."""
    return f"{value:.4f}" if value and abs(value) < 0.01 else f"{value:.2f}"


def test_tenants_plots_links_and_login_in_chromium(
    airflow_site: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    images = screenshot_dir(tmp_path_factory)
    binary = ensure_chromium()
    assert binary is not None, "chromium is not installed and could not be installed with apt-get"
    base, api = airflow_site["base"], airflow_site["api"]
    _, utilization = api.get("/fedsched/api/utilization")
    _, tenants = api.get("/fedsched/api/tenants")
    _, by_tenant = api.get("/fedsched/api/costs?by=day&split=tenant")
    _, by_dag = api.get("/fedsched/api/costs?by=day&split=dag")
    _, waits = api.get("/fedsched/api/waits")
    points = (
        "(sel) => [...document.querySelectorAll(sel)]"
        ".map(n => [n.dataset.series, n.dataset.x, Number(n.dataset.y)])"
    )
    with Browser(binary) as browser:
        browser.set_cookie(base, "_token", api.token)
        # Utilization over time per cluster: one point per recorded sample, at its value.
        browser.open(
            f"{base}/fedsched/ui#clusters",
            ready="document.querySelectorAll('#utilization-plot circle.point').length > 0",
        )
        drawn = browser.evaluate(f"({points})('#utilization-plot circle.point')")
        recorded = [
            [c["cluster"], s["at"], s["used_fraction"]["cpu"]]
            for c in utilization["clusters"]
            for s in c["samples"]
            if "cpu" in s["used_fraction"]
        ]
        assert drawn == recorded and len(drawn) >= 2 * len(airflow_site["clusters"])
        browser.screenshot(images / "federation-clusters.png")

        # The Tenants view: the rows of /api/tenants, and cost per day per tenant and per DAG as bars.
        browser.open(
            f"{base}/fedsched/ui#tenants",
            ready="document.querySelectorAll('#tenants-table tr[data-tenant]').length === 2"
            " && document.querySelectorAll('#cost-by-dag rect.bar').length > 0"
            " && document.querySelectorAll('#cost-by-tenant rect.bar').length > 0"
            " && document.querySelectorAll('#wait-by-tenant rect.bar').length > 0",
        )
        for row in tenants["tenants"]:
            cells = browser.evaluate(
                f"[...document.querySelector('tr[data-tenant={row['tenant']}]').children]"
                ".map(td => td.innerText)"
            )
            assert cells[0].startswith(row["tenant"]) and cells[5] == str(row["waiting"])
            assert cells[6].startswith(js_money(row["cost"])), cells
            for name, quota in row["quota"].items():
                assert f"{row['used'].get(name, '0')} / {quota}" in cells[2], cells
        for target, costs, split in (("cost-by-tenant", by_tenant, "tenant"), ("cost-by-dag", by_dag, "dag")):
            bars = browser.evaluate(f"({points})('#{target} rect.bar')")
            expected = [
                [s[split], r["day"], r["cost"]] for s in costs["series"] for r in s["rows"] if r["cost"] > 0
            ]
            assert sorted(bars) == sorted(expected) and bars, (bars, costs)
        # Wait before placement: tries per wait-time bucket, one series per tenant, as /api/waits counts.
        bars = browser.evaluate(f"({points})('#wait-by-tenant rect.bar')")
        expected = [[s["tenant"], bucket, n] for s in waits["series"] for bucket, n in s["counts"].items()]
        assert sorted(bars) == sorted(expected) and bars, (bars, waits)
        assert "team-data" in browser.text() and "team-ml" in browser.text()
        browser.screenshot(images / "federation-tenants.png")

        # The task's extra link names the cluster and opens the try's decision detail.
        run = urllib.parse.quote(airflow_site["run_id"], safe="")
        _, row = api.get(f"/fedsched/api/placements/{DAG_ID}/{run}/nightly_etl")
        ran_on = f"Ran on {row['cluster']}"
        links = "[...document.querySelectorAll('a')].filter(a => a.textContent.startsWith('Ran on '))"
        # The task instance's Details tab lists its extra links (those with a URL).
        browser.open(
            f"{base}/dags/{DAG_ID}/runs/{run}/tasks/nightly_etl/details", ready=f"{links}.length > 0"
        )
        assert browser.evaluate(f"{links}.map(a => a.textContent)") == [ran_on]
        browser.screenshot(images / "federation-extra-link.png", full_page=False)
        href = browser.evaluate(f"{links}[0].getAttribute('href')")
        assert href == decision_path(
            DAG_ID, airflow_site["run_id"], "nightly_etl", try_number=row["try_number"]
        )
        browser.open(
            base + href,
            ready="document.querySelectorAll('#detail table.candidates').length > 0",
        )
        assert "Decision detail: example_federated / nightly_etl" in browser.text()

        # Signed out, the page leads to Airflow's login, which is to come back to it.
        browser.call("Network.clearBrowserCookies")
        browser.open(f"{base}/fedsched/ui#tenants", ready="location.pathname.startsWith('/auth/login')")
        assert browser.evaluate("new URLSearchParams(location.search).get('next')") == "/fedsched/ui"
