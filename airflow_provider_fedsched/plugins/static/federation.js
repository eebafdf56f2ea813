// The Federation page: plain JS, no build step. Everything from the API is inserted as text (never HTML).
"use strict";

const PAGE_SIZE = 25;
// The failure vocabulary (federation/record.py FAILURE_KINDS): outcomes that moved a task elsewhere.
const LEFT = new Set(["insufficient", "evicted", "unreachable", "misconfigured"]);
const ENDED_BADLY = new Set(["failed", "lost", "cancelled"]);
const state = { offset: 0, total: 0, filters: {}, selected: null, live: false, largeEgressGb: 100, pendingDetail: null };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function getJSON(path) {
  const response = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (e) { /* not JSON */ }
    throw new Error(`${response.status}: ${typeof detail === "string" ? detail : JSON.stringify(detail)}`);
  }
  return response.json();
}

function seconds(value) {
  if (value === null || value === undefined) return "–";
  if (value < 60) return `${value.toFixed(value < 10 ? 1 : 0)} s`;
  if (value < 3600) return `${(value / 60).toFixed(1)} min`;
  return `${(value / 3600).toFixed(1)} h`;
}

function when(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  return date.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}

function outcomeBadge(outcome) {
  const kind = { succeeded: "ok", failed: "bad", lost: "bad", cancelled: "bad", running: "info", waiting: "warn" }[outcome]
    || (LEFT.has(outcome) ? "warn" : "");
  return el("span", { class: `badge ${kind}` }, outcome);
}

// A try that is waiting or running right now: since when, and why.
function liveNote(live) {
  if (!live) return null;
  const since = (Date.now() - new Date(live.since).getTime()) / 1000;
  return el("div", { class: "small live", title: live.why },
    `${live.state} for ${seconds(Math.max(0, since))}`, el("div", { class: "muted" }, live.why));
}

const RESOURCE_LABELS = { cpu: "CPU", memory: "Memory", "nvidia.com/gpu": "GPU" };

// Estimated cost (the spec's prices have no currency) and data moved.
function money(value) {
  if (value === null || value === undefined) return "–";
  return value !== 0 && Math.abs(value) < 0.01 ? value.toFixed(4) : value.toFixed(2);
}

function gigabytes(value) {
  if (!value) return "0 GB";
  return value >= 1000 ? `${(value / 1000).toFixed(value >= 10000 ? 0 : 1)} TB` : `${+value.toFixed(1)} GB`;
}

function capacity(cluster) {
  const names = Object.keys(cluster.total);
  if (!names.length) return "–";
  return el("table", { class: "capacity" }, el("tbody", {}, names.map((name) =>
    el("tr", {}, el("th", {}, RESOURCE_LABELS[name] || name),
      el("td", { class: "num" }, `${cluster.free[name] ?? "0"} / ${cluster.total[name]}`)))));
}

// --- Clusters ----------------------------------------------------------------------------------------
async function loadClusters() {
  const body = document.querySelector("#clusters-table tbody");
  const error = document.getElementById("clusters-error");
  let data;
  try {
    data = await getJSON("api/clusters");
  } catch (e) {
    error.hidden = false; error.textContent = `Cannot load clusters: ${e.message}`;
    return [];
  }
  document.getElementById("federation-name").textContent = data.federation ? `· ${data.federation}` : "";
  error.hidden = !data.error;
  error.textContent = data.error ? `The federation cannot be read: ${data.error}` : "";
  body.replaceChildren();
  if (!data.clusters.length) {
    body.append(el("tr", {}, el("td", { colspan: 8, class: "empty" }, "No member clusters.")));
  }
  for (const c of data.clusters) {
    const lastAnswered = c.last_answered_age_seconds !== null
      ? `last answered ${seconds(c.last_answered_age_seconds)} ago` : "never answered";
    const status = !c.snapshot ? el("span", { class: "badge", title: c.snapshot_note }, "no snapshot")
      : c.reachable ? el("span", { class: "badge ok" }, "reachable")
      : el("span", {}, el("span", { class: "badge bad" }, "unreachable"),
          el("div", { class: "small muted" }, c.reason), el("div", { class: "small muted" }, lastAnswered));
    const cooldown = c.cooldown
      ? el("span", {}, el("span", { class: "badge warn" }, `until ${when(c.cooldown.until)}`),
          el("div", { class: "small muted clamp", title: c.cooldown.reason }, c.cooldown.reason))
      : el("span", { class: "muted" }, "–");
    const outcomes = c.outcomes.samples
      ? el("span", {},
          el("span", { class: "dots", title: c.outcomes.recent.join(", ") },
            c.outcomes.recent.map((o) => el("span", { class: `dot ${o}`, title: o }))),
          Object.entries(c.outcomes.counts).map(([k, n]) => `${n} ${k}`).join(", "),
          c.outcomes.median_duration_seconds !== null
            ? el("div", { class: "small muted" }, `median run ${seconds(c.outcomes.median_duration_seconds)}`) : null)
      : el("span", { class: "muted" }, "none yet");
    body.append(el("tr", { "data-cluster": c.name },
      el("td", { class: "nowrap" }, el("strong", {}, c.name)),
      el("td", {}, c.region, c.group && c.group !== c.region ? el("span", { class: "muted" }, ` / ${c.group}`) : null),
      el("td", {}, status, c.snapshot
        ? el("div", { class: "small muted nowrap" }, `${c.ready_nodes}/${c.nodes} nodes ready`,
            el("br"), el("span", { class: "snapshot-age", title: c.snapshot_note }, `${seconds(c.snapshot_age_seconds)} old`),
            el("div", { class: "small muted snapshot-note" }, c.snapshot_note))
        : null,
        (c.missing_permissions || []).length
          ? el("div", { class: "missing-permissions" }, el("span", { class: "badge warn" }, "RBAC"),
              c.missing_permissions.map((m) => el("div", { class: "small" }, `not granted: ${m}`)))
          : null),
      el("td", {}, capacity(c)),
      el("td", { class: "small" }, c.largest_free_node || "–"),
      el("td", {}, cooldown),
      el("td", { class: "num", title: "median over recent pod starts" },
        c.start_latency.samples ? seconds(c.start_latency.median_seconds) : "–"),
      el("td", { class: "small" }, outcomes)));
  }
  const select = document.querySelector("#filters select[name=cluster]");
  const current = select.value;
  select.replaceChildren(el("option", { value: "" }, "any"), ...data.clusters.map((c) => el("option", {}, c.name)));
  select.value = current;
  await loadUtilization();
  return data.clusters;
}

async function loadUtilization() {
  const target = document.getElementById("utilization-plot");
  const resource = document.getElementById("utilization-resource").value;
  let data;
  try {
    data = await getJSON("api/utilization");
  } catch (e) {
    target.replaceChildren(el("p", { class: "notice error" }, `Cannot load utilization: ${e.message}`));
    return;
  }
  const series = data.clusters.map((c) => ({
    name: c.cluster,
    points: c.samples.filter((s) => resource in s.used_fraction).map((s) => ({ at: s.at, value: s.used_fraction[resource] })),
  }));
  target.replaceChildren(FedCharts.lines(series, { label: `${RESOURCE_LABELS[resource] || resource} utilization per cluster` }));
}

// --- Tenants -----------------------------------------------------------------------------------------
function amounts(values) {
  const names = Object.keys(values || {});
  if (!names.length) return el("span", { class: "muted" }, "–");
  return names.map((name) => el("div", { class: "nowrap" }, `${RESOURCE_LABELS[name] || name} ${values[name]}`));
}

function quotaUse(tenant) {
  const names = [...new Set([...Object.keys(tenant.quota), ...Object.keys(tenant.used)])];
  if (!names.length) return el("span", { class: "muted" }, "no quota");
  return el("table", { class: "capacity" }, el("tbody", {}, names.map((name) =>
    el("tr", { "data-resource": name }, el("th", {}, RESOURCE_LABELS[name] || name),
      el("td", { class: "num" }, `${tenant.used[name] ?? "0"} / ${tenant.quota[name] ?? "unlimited"}`)))));
}

function budgetNote(spent, limit, period, format) {
  return el("div", { class: "small muted" }, limit === null || limit === undefined
    ? `this ${period}, no budget` : `of ${format(limit)} this ${period}`);
}

async function loadTenants() {
  const body = document.querySelector("#tenants-table tbody");
  const error = document.getElementById("tenants-error");
  let data;
  try {
    data = await getJSON("api/tenants");
  } catch (e) {
    error.hidden = false; error.textContent = `Cannot load tenants: ${e.message}`;
    return;
  }
  error.hidden = !data.error;
  error.textContent = data.error ? `The tenants cannot be read: ${data.error}` : "";
  body.replaceChildren();
  if (!data.tenants.length) {
    body.append(el("tr", {}, el("td", { colspan: 8, class: "empty" }, "No tenants in the federation spec.")));
  }
  for (const t of data.tenants) {
    const over = t.max_cost !== null && t.cost > t.max_cost;
    body.append(el("tr", { "data-tenant": t.tenant },
      el("td", {}, el("strong", {}, t.tenant), t.reclaimable ? el("div", { class: "small muted" }, "may borrow") : null),
      el("td", { class: "num" }, t.weight),
      el("td", {}, quotaUse(t)),
      el("td", { class: "small" }, amounts(t.guaranteed)),
      el("td", { class: "small" }, Object.keys(t.borrowed).length ? el("span", { class: "badge warn" }, amounts(t.borrowed)) : el("span", { class: "muted" }, "–")),
      el("td", { class: "num waiting" }, t.waiting),
      el("td", { class: `num cost${over ? " over" : ""}` }, money(t.cost), budgetNote(t.cost, t.max_cost, t.period, money)),
      el("td", { class: "num egress" }, gigabytes(t.egress_gb), budgetNote(t.egress_gb, t.max_egress_gb, t.period, gigabytes))));
  }
  await Promise.all([costPlot("tenant", "cost-by-tenant"), costPlot("dag", "cost-by-dag"), waitPlot()]);
}

// How long tries waited for their first placement: tries per wait-time bucket, one stacked series per tenant.
async function waitPlot() {
  const box = document.getElementById("wait-by-tenant");
  let data;
  try {
    data = await getJSON(`api/waits?days=${COST_DAYS}`);
  } catch (e) {
    box.replaceChildren(el("p", { class: "notice error" }, `Cannot load wait times: ${e.message}`));
    return;
  }
  if (data.error) {
    box.replaceChildren(el("p", { class: "notice error" }, data.error));
    return;
  }
  document.getElementById("wait-window").textContent = `(last ${COST_DAYS} days, ${data.samples} tries placed)`;
  const series = data.series.map((s) => ({ name: s.tenant, values: s.counts }));
  box.replaceChildren(FedCharts.stackedBars(data.buckets, series, { label: "tries per wait before placement",
    format: (v) => String(Math.round(v)), none: "No try placed in this window.", counts: true }));
}

// Cost per day, one stacked series per tenant (or DAG), from the charges of the last COST_DAYS days.
const COST_DAYS = 14;
async function costPlot(split, target) {
  const box = document.getElementById(target);
  let data;
  try {
    data = await getJSON(`api/costs?by=day&split=${split}&days=${COST_DAYS}`);
  } catch (e) {
    box.replaceChildren(el("p", { class: "notice error" }, `Cannot load costs: ${e.message}`));
    return;
  }
  document.getElementById("cost-window").textContent = `(last ${COST_DAYS} days, ${data.charges} cluster attempts charged)`;
  const days = data.rows.map((row) => row.day);
  const series = data.series.map((s) => ({ name: s[split], values: Object.fromEntries(s.rows.map((row) => [row.day, row.cost])) }));
  box.replaceChildren(FedCharts.stackedBars(days, series, { label: `cost per day per ${split}`, format: money,
    none: "No cluster attempt charged in this window." }));
}

// --- Placement history -------------------------------------------------------------------------------
function placementsQuery() {
  const params = new URLSearchParams({ limit: PAGE_SIZE, offset: state.offset });
  for (const [key, value] of Object.entries(state.filters)) if (value) params.set(key, value);
  return params;
}

function attemptList(row) {
  return el("ol", { class: "attempts" }, row.attempts.map((a) =>
    el("li", {},
      el("strong", {}, a.cluster), " ", outcomeBadge(a.outcome),
      a.indices ? el("span", { class: "small mono", title: "the divided job's indices this slice ran" }, ` indices ${a.indices}`) : null,
      a.resumed_from_checkpoint ? el("span", { class: "badge info" }, "resumed") : null,
      el("span", { class: `small muted attempt-cost${a.egress_gb >= state.largeEgressGb ? " large" : ""}` },
        ` cost ${money(a.cost)} · ${gigabytes(a.egress_gb)} moved`),
      LEFT.has(a.outcome) || ENDED_BADLY.has(a.outcome) ? el("span", { class: "reason" }, a.reason) : null)));
}

function taskInstanceCell(row) {
  return el("td", {},
    el("a", { href: row.task_instance_url, target: "_top", class: "ti-link" }, `${row.dag_id} / ${row.task_id}`),
    row.map_index >= 0 ? ` [${row.map_index}]` : null,
    el("div", { class: "small muted mono" }, row.run_id));
}

async function loadPlacements() {
  const body = document.querySelector("#placements-table tbody");
  let data;
  try {
    data = await getJSON(`api/placements?${placementsQuery()}`);
  } catch (e) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: 11, class: "empty" }, `Cannot load placements: ${e.message}`)));
    return;
  }
  state.total = data.total;
  state.largeEgressGb = data.large_egress_gb;
  state.live = data.placements.some((row) => row.live);
  body.replaceChildren();
  if (!data.placements.length) {
    body.append(el("tr", {}, el("td", { colspan: 11, class: "empty" }, "No placement recorded for these filters.")));
  }
  for (const row of data.placements) {
    const key = [row.dag_id, row.run_id, row.task_id, row.map_index].join("\u0000");
    if (!row.readable) {
      body.append(el("tr", { class: "unreadable" },
        el("td", { class: "small" }, when(row.recorded_at)), taskInstanceCell(row), el("td", { class: "num" }, "–"),
        el("td", { colspan: 8 }, `unreadable placement record: ${row.error}`)));
      continue;
    }
    const classes = [row.failover ? "failover" : "", row.large_egress ? "large-egress" : "", state.selected === key ? "selected" : ""];
    const tr = el("tr", { class: classes.join(" ").trim() || null,
                          "data-task": row.task_id },
      el("td", { class: "small" }, when(row.recorded_at)),
      taskInstanceCell(row),
      el("td", { class: "num" }, row.try_number),
      el("td", {}, row.cluster ? el("strong", {}, row.cluster) : el("span", { class: "muted" }, "–"),
        row.failover ? el("div", {}, el("span", { class: "badge warn failover-mark" }, "failed over")) : null),
      el("td", {}, outcomeBadge(row.outcome), liveNote(row.live)),
      el("td", {}, row.plan_used ? el("span", { class: "badge info" }, "plan") : el("span", { class: "muted" }, "–")),
      el("td", {}, attemptList(row)),
      el("td", { class: "num cost" }, money(row.cost),
        el("div", { class: "small" }, row.large_egress
          ? el("span", { class: "badge warn egress-mark", title: `at least ${gigabytes(state.largeEgressGb)} moved between clusters` }, `${gigabytes(row.egress_gb)} moved`)
          : el("span", { class: "muted" }, `${gigabytes(row.egress_gb)} moved`))),
      el("td", { class: "num" }, seconds(row.waited_seconds)),
      el("td", { class: "num" }, seconds(row.failover_seconds)),
      el("td", {}, el("button", { type: "button", class: "button secondary", onclick: () => showDetail(row, key) }, "Decision")));
    body.append(tr);
  }
  const last = Math.min(state.offset + data.placements.length, state.total);
  document.getElementById("page-info").textContent =
    state.total ? `${state.offset + 1}–${last} of ${state.total}` : "0 results";
  document.getElementById("prev").disabled = state.offset === 0;
  document.getElementById("next").disabled = last >= state.total;
}

// --- Decision detail ---------------------------------------------------------------------------------
function candidatesTable(decision) {
  const plugins = decision.plugins;
  const head = el("tr", {}, el("th", { class: "num" }, "#"), el("th", {}, "Cluster"), el("th", { class: "num" }, "Score"),
    plugins.map((p) => el("th", { class: "num", title: "weighted score (raw value, weight)" }, p)),
    el("th", { class: "num" }, "Snapshot age"));
  const rows = decision.candidates.map((c, i) => el("tr", { class: c.cluster === decision.cluster ? "winner" : null },
    el("td", { class: "num" }, i + 1), el("td", {}, c.cluster), el("td", { class: "num" }, c.score.toFixed(1)),
    plugins.map((p) => {
      const term = c.breakdown[p];
      return el("td", { class: "num" }, term
        ? [term.weighted.toFixed(1), el("div", { class: "small muted" }, `raw ${+term.raw.toFixed(3)} · ×${term.weight}`)]
        : "–");
    }),
    el("td", { class: "num" }, seconds(decision.snapshot_age_seconds[c.cluster]))));
  return el("div", { class: "table-wrap" }, el("table", { class: "data candidates" }, el("thead", {}, head), el("tbody", {}, rows)));
}

function rejectionsTable(decision) {
  return el("div", { class: "table-wrap" }, el("table", { class: "data rejections" },
    el("thead", {}, el("tr", {}, el("th", {}, "Cluster"), el("th", {}, "Plugin"), el("th", {}, "Reason"), el("th", {}, "Kind"))),
    el("tbody", {}, decision.rejected.map((r) => el("tr", {},
      el("td", {}, r.cluster), el("td", {}, r.plugin), el("td", {}, r.reason),
      el("td", {}, r.permanent ? el("span", { class: "badge bad" }, "never") : el("span", { class: "badge" }, "not now")))))));
}

// A divided Job's decision (issue 31): each member's slice (its indices, pods at a time, estimate) and why
// each member got what it got, or was left out.
function slicesTable(decision) {
  const slices = (decision.extra && decision.extra.slices) || {};
  const why = (decision.extra && decision.extra.division) || {};
  const members = [...new Set([...Object.keys(slices), ...Object.keys(why)])];
  return el("div", { class: "table-wrap" }, el("table", { class: "data slices" },
    el("thead", {}, el("tr", {}, el("th", {}, "Cluster"), el("th", {}, "Indices"), el("th", { class: "num" }, "At a time"),
      el("th", { class: "num" }, "Est. cost"), el("th", { class: "num" }, "Egress"), el("th", {}, "Why"))),
    el("tbody", {}, members.map((cluster) => {
      const s = slices[cluster];
      return el("tr", {},
        el("td", {}, cluster), el("td", { class: "mono" }, s ? s.indices : "–"),
        el("td", { class: "num" }, s ? String(s.parallelism) : "–"),
        el("td", { class: "num" }, s ? money(s.total) : "–"),
        el("td", { class: "num" }, s ? gigabytes(s.egress_gb) : "–"),
        el("td", {}, why[cluster] || ""));
    }))));
}

// Where the try's data was written (an inlet's latest asset event), its size and the rule it inherited.
function dataTable(data) {
  const none = (v) => (v === null || v === undefined ? "–" : v);
  return el("div", { class: "table-wrap" }, el("table", { class: "data assets" },
    el("thead", {}, el("tr", {}, ...["Asset", "Role", "Written on", "Region", "Size", "Inherited rule"].map((h) => el("th", {}, h)))),
    el("tbody", {}, data.map((a) => el("tr", {},
      el("td", { class: "mono" }, a.uri), el("td", {}, a.role), el("td", {}, none(a.written_on)),
      el("td", {}, none(a.written_region)),
      el("td", { class: "num" }, a.written_size_gb === null || a.written_size_gb === undefined ? "–" : gigabytes(a.written_size_gb)),
      el("td", {}, a.inherited_regions ? a.inherited_regions.join(", ") : "–"))))));
}

async function showDetail(row, key) {
  state.selected = key;
  const panel = document.getElementById("detail");
  panel.hidden = false;
  panel.replaceChildren(el("p", { class: "muted" }, "Loading decision…"));
  const path = ["api/placements", row.dag_id, row.run_id, row.task_id].map((p, i) => (i ? encodeURIComponent(p) : p)).join("/");
  let detail;
  try {
    const tryNumber = row.try_number !== undefined && row.try_number !== null ? `&try_number=${row.try_number}` : "";
    detail = await getJSON(`${path}?map_index=${row.map_index}${tryNumber}`);
  } catch (e) {
    panel.replaceChildren(el("p", { class: "notice error" }, `Cannot load the decision: ${e.message}`));
    return;
  }
  const parts = [
    el("h2", {}, `Decision detail: ${detail.dag_id} / ${detail.task_id}, try ${detail.try_number}`),
    el("dl", {},
      el("dt", {}, "Run"), el("dd", { class: "mono" }, detail.run_id),
      el("dt", {}, "Ran on"), el("dd", {}, detail.cluster || "–", " ", outcomeBadge(detail.outcome)),
      el("dt", {}, "Reason"), el("dd", {}, detail.reason || "–"),
      el("dt", {}, "Cost / egress"), el("dd", {}, `${money(detail.cost)} · ${gigabytes(detail.egress_gb)} moved`),
      el("dt", {}, "Waited / failing over"), el("dd", {}, `${seconds(detail.waited_seconds)} / ${seconds(detail.failover_seconds)}`),
      el("dt", {}, "Task instance"), el("dd", {}, el("a", { href: detail.task_instance_url, target: "_top" }, "open in Airflow"))),
  ];
  if (detail.data && detail.data.length) parts.push(el("h3", {}, "Data"), dataTable(detail.data));
  detail.decisions.forEach((d, i) => {
    parts.push(el("h3", {}, `Decision ${i + 1} of ${detail.decisions.length}: `,
      d.readable ? outcomeBadge(d.outcome) : "unreadable", d.cluster ? ` → ${d.cluster}` : ""));
    if (!d.readable) { parts.push(el("p", { class: "muted" }, d.error)); return; }
    parts.push(el("p", {}, d.reason), el("p", { class: "small muted" }, `decided ${when(d.decided_at)}`));
    if (d.candidates.length) parts.push(el("h3", {}, "Candidates (best first)"), candidatesTable(d));
    if (d.rejected.length) parts.push(el("h3", {}, "Rejected"), rejectionsTable(d));
    if (d.extra && (d.extra.slices || d.extra.division)) parts.push(el("h3", {}, "Slices of the divided job"), slicesTable(d));
  });
  if (!detail.decisions.length) parts.push(el("p", { class: "muted" }, "No decision recorded."));
  panel.replaceChildren(...parts);
  document.querySelectorAll("#placements-table tbody tr").forEach((tr) => tr.classList.remove("selected"));
  panel.scrollIntoView({ behavior: "smooth", block: "start" });
}

// --- Audit -------------------------------------------------------------------------------------------
async function loadAudit(params) {
  const body = document.querySelector("#audit-table tbody");
  const error = document.getElementById("audit-error");
  const summary = document.getElementById("audit-summary");
  const query = new URLSearchParams(params);
  document.getElementById("audit-download").href = `api/audit?${new URLSearchParams({ ...params, download: "true" })}`;
  body.replaceChildren();
  summary.textContent = "";
  let data;
  try {
    data = await getJSON(`api/audit${query.toString() ? `?${query}` : ""}`);
  } catch (e) {
    error.hidden = false; error.textContent = `Cannot audit: ${e.message}`;
    return;
  }
  error.hidden = !data.error;
  error.textContent = data.error ? `The federation cannot be read: ${data.error}` : "";
  if (data.error) return;
  const h = data.header;
  const unread = Object.entries(h.ledgers).filter(([, s]) => s !== "read");
  summary.replaceChildren(
    el("span", { class: `badge ${h.verdicts.violation ? "bad" : "ok"}` },
      h.verdicts.violation ? `${h.verdicts.violation} violation(s)` : "no violation"),
    ` ${h.entries} entries: ${h.verdicts.compliant} compliant, ${h.verdicts.unverifiable} unverifiable; `,
    `${h.records.read} record(s) read, ${h.records.unreadable} unreadable.`,
    unread.map(([cluster, why]) => el("div", { class: "small muted" }, `Ledger of ${cluster} not read: ${why}`)));
  if (!data.entries.length) {
    body.append(el("tr", {}, el("td", { colspan: 9, class: "empty" }, "No try read a restricted dataset in this window.")));
  }
  const kinds = { compliant: "ok", violation: "bad", unverifiable: "warn" };
  for (const e of data.entries) {
    body.append(el("tr", { "data-verdict": e.verdict },
      el("td", { class: "num" }, e.number),
      el("td", {}, el("span", { class: `badge ${kinds[e.verdict] || ""}` }, e.verdict)),
      el("td", {}, `${e.dag_id}.${e.task_id}`, el("div", { class: "small muted" },
        e.run_id, e.map_index !== null && e.map_index >= 0 ? ` [${e.map_index}]` : "")),
      el("td", { class: "num" }, e.try_number ?? "?"),
      el("td", {}, e.cluster || "?"),
      el("td", {}, e.region || "?"),
      el("td", { class: "small" }, e.allowed_regions ? e.allowed_regions.join(", ") : "?",
        el("div", { class: "muted" }, e.datasets.map((d) => d.rule).join("; "))),
      el("td", { class: "small" }, e.seen_in.join(" + ") || "–"),
      el("td", { class: "small" }, e.reason)));
  }
}

// --- Views and wiring --------------------------------------------------------------------------------
function show(view) {
  for (const name of ["clusters", "tenants", "placements", "audit"]) {
    document.getElementById(`view-${name}`).hidden = name !== view;
    document.getElementById(`tab-${name}`).setAttribute("aria-selected", String(name === view));
  }
  document.body.dataset.view = view;
}

async function route() {
  const [view, query] = location.hash.replace(/^#/, "").split("?");
  if (view === "placements") {
    state.filters = Object.fromEntries(new URLSearchParams(query || ""));
    const form = document.getElementById("filters");
    for (const input of form.elements) if (input.name) input.value = state.filters[input.name] || "";
    show("placements");
    await loadPlacements();
    if (state.pendingDetail) {  // opened from a task's "Ran on <cluster>" link
      const wanted = state.pendingDetail;
      state.pendingDetail = null;
      await showDetail(wanted, [wanted.dag_id, wanted.run_id, wanted.task_id, wanted.map_index].join("\u0000"));
    }
  } else if (view === "audit") {
    const params = Object.fromEntries(new URLSearchParams(query || ""));
    const form = document.getElementById("audit-filters");
    for (const input of form.elements) if (input.name) input.value = params[input.name] || "";
    show("audit");
    await loadAudit(params);
  } else if (view === "tenants") {
    show("tenants");
    await loadTenants();
  } else {
    show("clusters");
    await loadClusters();
  }
  document.body.dataset.loaded = "true";
}

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("filters");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    state.offset = 0;
    const params = new URLSearchParams();
    for (const [key, value] of new FormData(form)) if (value) params.set(key, value);
    location.hash = `placements${params.toString() ? `?${params}` : ""}`;
  });
  const auditForm = document.getElementById("audit-filters");
  auditForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const params = new URLSearchParams();
    for (const [key, value] of new FormData(auditForm)) if (value) params.set(key, value);
    location.hash = `audit${params.toString() ? `?${params}` : ""}`;
  });
  form.addEventListener("reset", () => setTimeout(() => { state.offset = 0; location.hash = "placements"; }));
  document.getElementById("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE_SIZE); loadPlacements(); });
  document.getElementById("next").addEventListener("click", () => { state.offset += PAGE_SIZE; loadPlacements(); });
  document.getElementById("refresh").addEventListener("click", route);
  window.addEventListener("hashchange", route);
  // While a listed try waits or runs, keep its row current (every 10 s, only while the page is visible).
  setInterval(() => { if (state.live && !document.hidden && !state.selected) loadPlacements(); }, 10000);
  document.getElementById("utilization-resource").addEventListener("change", loadUtilization);
  // A task's extra link: the page on that try's decision detail (in the query string, which survives login).
  const link = new URLSearchParams(location.search);
  if (link.get("dag_id") && link.get("run_id") && link.get("task_id")) {
    state.pendingDetail = {
      dag_id: link.get("dag_id"), run_id: link.get("run_id"), task_id: link.get("task_id"),
      map_index: Number(link.get("map_index") || -1), try_number: link.get("try_number") ? Number(link.get("try_number")) : null,
    };
    const filters = new URLSearchParams({ dag_id: state.pendingDetail.dag_id, run_id: state.pendingDetail.run_id, task_id: state.pendingDetail.task_id });
    history.replaceState(null, "", `${location.pathname}${location.search}#placements?${filters}`);
  }
  loadClusters();  // also fills the cluster filter
  route();
});
