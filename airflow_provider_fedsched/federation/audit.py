"""The sovereignty audit: for every try that touched a restricted dataset, where it placed pods or Jobs, the
rule in force there, and a verdict; chained with SHA-256 so that an exported report can be verified later.

Pure: the caller reads the placement records (``plugins/history.py``) and every member's placement ledger
(``hooks/ledgers.py``) and passes them in. An entry is one cluster a try placed work in, as its record says
(an attempt) or as a member's ledger says (an entry whose placement id is the try's but which the record
does not name). Its verdict:

* ``violation``: the cluster's region is outside the regions the try's restricted datasets allow;
* ``unverifiable``: the audit cannot tell (the record is unreadable or keeps no request, a dataset or the
  cluster is no longer in the spec, the cluster's ledger could not be read or is not kept);
* ``compliant``: the cluster's region is allowed and its ledger, read, contradicts nothing.

The chain: the report's header is hashed first; each entry carries ``previous`` (the hash before it: the
header's for the first) and ``hash`` (SHA-256 of its canonical JSON, ``hash`` left out, ``previous`` in);
``chain_end`` is the last hash. The report is written in one canonical form (:func:`dump_report`), so that
:func:`verify_report` also detects a change that JSON would not see (whitespace, an escape's case).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import ValidationError

from airflow_provider_fedsched.federation._errors import PermanentError
from airflow_provider_fedsched.federation.assets import AssetDataset
from airflow_provider_fedsched.federation.record import Attempt, PlacementRecord
from airflow_provider_fedsched.federation.spec import FederationSpec, SpecError, spec_fingerprint

__all__ = [
    "FORMAT",
    "MAX_REPORT_BYTES",
    "VERDICTS",
    "VERSION",
    "LedgerReading",
    "NotAReport",
    "UnreadableTry",
    "Verification",
    "build_report",
    "canonical",
    "check_dataset",
    "dump_report",
    "restricted_datasets",
    "verify_report",
]

FORMAT = "fedsched-audit-report"
VERSION = 1
VERDICTS = ("compliant", "violation", "unverifiable")
Verdict = Literal["compliant", "violation", "unverifiable"]
MAX_REPORT_BYTES = 64 * 2**20
"""``audit verify`` reads at most this much (a report of about 50,000 entries)."""
MIN_BYTES_PER_VALUE = 8
"""The exported form writes each value on its own indented line: a document denser than this (``[0,0,...``)
is not a report, and is refused before it is parsed into millions of objects."""
MAX_REPORT_DEPTH = 8
"""A report nests four levels deep; anything deeper is not one."""


@dataclass(frozen=True)
class LedgerReading:
    """One member's placement ledger as the audit found it: the placement ids it holds, or why not."""

    held: frozenset[str] | None
    problem: str = ""
    """Why ``held`` is None: the ledger could not be read, or is not kept."""

    def describe(self) -> str:
        return "read" if self.held is not None else self.problem


@dataclass(frozen=True)
class UnreadableTry:
    """A stored value under the record's key that is not a readable record: it may have touched anything."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    error: str


class NotAReport(PermanentError, ValueError):
    """The bytes given to :func:`verify_report` are not an audit report (no chain to verify)."""


def canonical(value: Any) -> bytes:
    """The one JSON form hashed: sorted keys, no spaces, ASCII, no NaN."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode()


def _sha256(value: Any) -> str:
    return hashlib.sha256(canonical(value)).hexdigest()


def dump_report(report: Mapping[str, Any]) -> str:
    """The report as exported (``fedsched audit --json``): the only form :func:`verify_report` accepts."""
    return json.dumps(report, sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False) + "\n"


# --- Building ------------------------------------------------------------------------------------------
def restricted_datasets(spec: FederationSpec) -> dict[str, dict[str, Any]]:
    """Every dataset with allowed regions: the rule, and where it comes from (the spec's entry)."""
    return {
        dataset.name: {
            "name": dataset.name,
            "allowed_regions": sorted(dataset.allowed_regions),
            "rule": f"federation spec '{spec.name}', datasets[{index}] ({dataset.name})",
        }
        for index, dataset in enumerate(spec.datasets)
        if dataset.allowed_regions is not None
    }


def check_dataset(spec: FederationSpec, name: str, field: str) -> None:
    """``name`` is a restricted dataset of ``spec``; else :class:`SpecError` naming ``field`` and the known
    ones (an unrestricted dataset may go anywhere: there is nothing to audit)."""
    restricted = restricted_datasets(spec)
    if name in restricted:
        return
    if any(dataset.name == name for dataset in spec.datasets):
        raise SpecError(
            f"{field}: '{name}' has no allowed_regions in the spec: it may go anywhere, nothing to audit "
            f"(restricted: {', '.join(sorted(restricted)) or 'none'})"
        )
    known = ", ".join(dataset.name for dataset in spec.datasets) or "none"
    raise SpecError(f"{field}: unknown dataset '{name[:60]}' (known: {known})")


def build_report(
    spec: FederationSpec,
    records: Iterable[PlacementRecord],
    ledgers: Mapping[str, LedgerReading],
    *,
    generated_at: datetime,
    unreadable: Iterable[UnreadableTry] = (),
    since: datetime | None = None,
    until: datetime | None = None,
    dataset: str | None = None,
    scope: str | None = None,
) -> dict[str, Any]:
    """The chained report of every try in ``records`` that touched a restricted dataset (only ``dataset``
    when given). ``ledgers``: every member's reading; a member missing from it counts as not read.
    ``scope``: which DAGs the records were limited to (None: every DAG)."""
    rules = restricted_datasets(spec)
    bodies: list[dict[str, Any]] = []
    read = 0
    for record in sorted(records, key=_try_order):
        read += 1
        bodies.extend(_try_entries(spec, rules, record, ledgers, dataset))
    skipped = 0
    for bad in sorted(unreadable, key=lambda u: (u.dag_id, u.run_id, u.task_id, u.map_index)):
        skipped += 1
        bodies.append(
            _entry(
                {
                    "dag_id": bad.dag_id,
                    "run_id": bad.run_id,
                    "task_id": bad.task_id,
                    "map_index": bad.map_index,
                },
                datasets=[],
                allowed=None,
                verdict="unverifiable",
                reason=f"the placement record is unreadable ({bad.error}): which datasets the try read and "
                "where it ran cannot be told",
            )
        )
    counts = {verdict: sum(1 for body in bodies if body["verdict"] == verdict) for verdict in VERDICTS}
    header = {
        "format": FORMAT,
        "version": VERSION,
        "federation": spec.name,
        "spec_sha256": spec_fingerprint(spec),
        "generated_at": generated_at.isoformat(),
        "since": since.isoformat() if since is not None else None,
        "until": until.isoformat() if until is not None else None,
        "dataset": dataset,
        "scope": scope or "every DAG",
        "restricted_datasets": [rules[name] for name in sorted(rules)],
        "ledgers": {member.name: _ledger(ledgers, member.name).describe() for member in spec.clusters},
        "records": {"read": read, "unreadable": skipped},
        "entries": len(bodies),
        "verdicts": counts,
    }
    entries, previous = [], _sha256(header)
    for number, body in enumerate(bodies, start=1):
        entry = {**body, "number": number, "previous": previous}
        previous = _sha256(entry)
        entries.append({**entry, "hash": previous})
    return {"header": header, "entries": entries, "chain_end": previous}


def _try_order(record: PlacementRecord) -> tuple[Any, ...]:
    return (
        record.started_at,
        record.dag_id,
        record.run_id,
        record.task_id,
        record.map_index,
        record.try_number,
    )


def _ledger(ledgers: Mapping[str, LedgerReading], cluster: str) -> LedgerReading:
    return ledgers.get(cluster) or LedgerReading(None, "not read")


def _entry(
    identity: Mapping[str, Any],
    *,
    datasets: list[dict[str, Any]],
    allowed: list[str] | None,
    verdict: Verdict,
    reason: str,
    **placement: Any,
) -> dict[str, Any]:
    return {
        "dag_id": identity["dag_id"],
        "run_id": identity["run_id"],
        "task_id": identity["task_id"],
        "map_index": identity["map_index"],
        "try_number": identity.get("try_number"),
        "try_started_at": identity.get("try_started_at"),
        "datasets": datasets,
        "allowed_regions": allowed,
        "cluster": placement.get("cluster"),
        "region": placement.get("region"),
        "attempt": placement.get("attempt"),
        "placement_id": placement.get("placement_id"),
        "namespace": placement.get("namespace"),
        "pod": placement.get("pod"),
        "outcome": placement.get("outcome"),
        "seen_in": placement.get("seen_in", []),
        "ledger": placement.get("ledger"),
        "verdict": verdict,
        "reason": reason,
    }


def _try_entries(
    spec: FederationSpec,
    rules: Mapping[str, Mapping[str, Any]],
    record: PlacementRecord,
    ledgers: Mapping[str, LedgerReading],
    only: str | None,
) -> list[dict[str, Any]]:
    identity = {
        "dag_id": record.dag_id,
        "run_id": record.run_id,
        "task_id": record.task_id,
        "map_index": record.map_index,
        "try_number": record.try_number,
        "try_started_at": record.started_at.isoformat(),
    }
    attempts = _placed(record)
    names = _datasets(record)
    asset_rules, unresolved = _asset_rules(spec, record)
    if names is None and (asset_rules or unresolved):
        names = []
    if names is None:
        if not attempts or only is not None:
            return []  # nothing placed, or not the dataset asked about as far as anyone can tell
        return [
            _entry(
                identity,
                datasets=[],
                allowed=None,
                verdict="unverifiable",
                reason="the placement record keeps no request: which datasets the try read cannot be told",
                **_attempt_fields(spec, attempt, ledgers),
            )
            for attempt in attempts
        ]
    if only is not None and only not in names and all(rule["name"] != only for rule in asset_rules):
        return []
    known = {dataset.name for dataset in spec.datasets}
    unknown = [name for name in names if name not in known] + unresolved
    restricted = [dict(rules[name]) for name in names if name in rules]
    restricted += [rule for rule in asset_rules if rule not in restricted]
    if not restricted and not unknown:
        return []
    allowed = _allowed(restricted)
    placements: list[tuple[Attempt, tuple[str, ...]]] = [(attempt, ("record",)) for attempt in attempts]
    placements.extend(_ledger_only(record, attempts, ledgers))
    entries = []
    for attempt, seen_in in placements:
        fields = _attempt_fields(spec, attempt, ledgers, seen_in)
        verdict, reason = _judge(
            fields, restricted, allowed, unknown, _ledger(ledgers, attempt.cluster), seen_in
        )
        entries.append(
            _entry(identity, datasets=restricted, allowed=allowed, verdict=verdict, reason=reason, **fields)
        )
    return entries


def _datasets(record: PlacementRecord) -> list[str] | None:
    """The datasets the try read, from the request it recorded (None: the record keeps none)."""
    request = record.request
    if request is None:
        return None
    names = request.get("datasets")
    if not isinstance(names, list):
        return None
    return [str(name) for name in names]


def _asset_rules(spec: FederationSpec, record: PlacementRecord) -> tuple[list[dict[str, Any]], list[str]]:
    """The rules the try's Airflow Assets brought (an entry's, or narrower, from the asset's extra), and
    the assets the spec now cannot resolve (the rule they were placed under cannot be told)."""
    raw = record.request.get("assets") if record.request is not None else None
    rules: list[dict[str, Any]] = []
    unresolved: list[str] = []
    indices = {dataset.name: index for index, dataset in enumerate(spec.datasets)}
    for position, item in enumerate(raw if isinstance(raw, list) else []):
        try:
            asset = AssetDataset.model_validate(item)
            resolved = spec.resolve_asset(asset, f"request.assets[{position}]")
        except (ValidationError, SpecError):
            uri = item.get("uri") if isinstance(item, Mapping) else None
            unresolved.append(f"asset '{str(uri)[:200]}'" if isinstance(uri, str) else f"asset #{position}")
            continue
        if resolved is None or resolved.allowed_regions is None:
            continue
        fields = asset.fedsched
        own = fields is not None and fields.allowed_regions is not None
        if resolved.entry is not None:
            rule = f"federation spec '{spec.name}', datasets[{indices[resolved.entry]}] ({resolved.entry})"
            if own:
                rule += f", narrowed by asset '{asset.uri}' extra.fedsched"
        elif own:
            rule = f"asset '{asset.uri}' extra.fedsched"
        else:
            rule = ""
        if resolved.inherited_regions is not None:
            inherited = (
                f"inherited from the data asset '{asset.uri}' was derived from (its latest event, "
                f"written on {resolved.written_on or 'a member the spec no longer has'})"
            )
            rule = f"{rule}, narrowed by the rule {inherited}" if rule else f"the rule {inherited}"
        rules.append(
            {
                "name": resolved.name,
                "asset": asset.uri,
                "allowed_regions": sorted(resolved.allowed_regions),
                "rule": rule,
            }
        )
    return rules, unresolved


def _placed(record: PlacementRecord) -> list[Attempt]:
    """Every cluster attempt the record names, an earlier try's left pod included, each placement once."""
    seen: set[str] = set()
    placed = []
    for attempt in record.known_attempts:
        key = attempt.placement_id or f"{attempt.cluster}/{attempt.number}"
        if key not in seen:
            seen.add(key)
            placed.append(attempt)
    return placed


def _ledger_only(
    record: PlacementRecord, attempts: Sequence[Attempt], ledgers: Mapping[str, LedgerReading]
) -> list[tuple[Attempt, tuple[str, ...]]]:
    """Placements of this try that a member's ledger holds where the record names no attempt."""
    recorded = {(attempt.cluster, attempt.placement_id) for attempt in attempts}
    prefix = record.placement_prefix
    found: list[tuple[Attempt, tuple[str, ...]]] = []
    for cluster in sorted(ledgers):
        held = ledgers[cluster].held or frozenset()
        for placement_id in sorted(held):
            if placement_id.startswith(prefix) and (cluster, placement_id) not in recorded:
                number = placement_id.removeprefix(prefix)
                found.append(
                    (
                        Attempt(
                            number=int(number) if number.isdigit() and len(number) < 7 else 0,
                            cluster=cluster,
                            namespace="",
                            pod="",
                            placement_id=placement_id,
                            outcome="running",
                            started_at=record.started_at,
                        ),
                        ("ledger",),
                    )
                )
    return found


def _attempt_fields(
    spec: FederationSpec,
    attempt: Attempt,
    ledgers: Mapping[str, LedgerReading],
    seen_in: tuple[str, ...] = ("record",),
) -> dict[str, Any]:
    member = next((c for c in spec.clusters if c.name == attempt.cluster), None)
    reading = _ledger(ledgers, attempt.cluster)
    if reading.held is None:
        ledger = f"not read: {reading.problem}"
    elif attempt.placement_id in reading.held:
        ledger = "holds the placement"
    else:
        ledger = "does not hold the placement (an entry is released once its pod shows or ends)"
    recorded = "record" in seen_in
    return {
        "cluster": attempt.cluster,
        "region": member.region if member is not None else None,
        "attempt": attempt.number if recorded else None,
        "placement_id": attempt.placement_id,
        "namespace": attempt.namespace if recorded else None,
        "pod": attempt.pod if recorded else None,
        "outcome": attempt.outcome if recorded else None,
        "seen_in": [*seen_in, *(["ledger"] if recorded and ledger == "holds the placement" else [])],
        "ledger": ledger,
    }


def _allowed(restricted: Sequence[Mapping[str, Any]]) -> list[str] | None:
    """The regions every restricted dataset of the try allows (the narrowest rule wins)."""
    if not restricted:
        return None
    regions = set(restricted[0]["allowed_regions"])
    for rule in restricted[1:]:
        regions &= set(rule["allowed_regions"])
    return sorted(regions)


def _judge(
    fields: Mapping[str, Any],
    restricted: Sequence[Mapping[str, Any]],
    allowed: list[str] | None,
    unknown: Sequence[str],
    reading: LedgerReading,
    seen_in: tuple[str, ...],
) -> tuple[Verdict, str]:
    cluster, region = fields["cluster"], fields["region"]
    where = "the record" if "record" in seen_in else f"{cluster}'s ledger (the record names no such attempt)"
    if region is None:
        return "unverifiable", (
            f"{where} places it on {cluster}, which is not a member of the spec now: its region is unknown"
        )
    if allowed is not None and region not in allowed:
        rules = "; ".join(f"{rule['name']}: {', '.join(rule['allowed_regions'])}" for rule in restricted)
        return "violation", (
            f"{where} places it on {cluster} in region {region}, outside the allowed regions "
            f"[{', '.join(allowed)}] ({rules})"
        )
    if unknown:
        return "unverifiable", (
            f"dataset(s) {', '.join(unknown)} are not in the spec now: the rule the try was placed under "
            "cannot be told"
        )
    if reading.held is None:
        return "unverifiable", (
            f"{where} places it on {cluster} in allowed region {region}, but {cluster}'s ledger cannot "
            f"cross-check it: {reading.problem}"
        )
    if "record" not in seen_in:
        return "compliant", (
            f"{where} holds it on {cluster}, in allowed region {region}: the record and the ledger disagree "
            "on where the try placed work, but both places are allowed"
        )
    return "compliant", f"{cluster} is in allowed region {region}; its ledger contradicts nothing"


# --- Verifying -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verification:
    """What :func:`verify_report` found: ``problem`` is None when everything verifies."""

    entries: int
    problem: str | None = None
    entry: int | None = None
    """The first entry that does not verify (1-based), when the problem is one entry's."""
    verdicts: Mapping[str, int] | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def verify_report(data: bytes) -> Verification:
    """Check an exported report: the header, every entry and the chain, then the exact bytes. Raises
    :class:`NotAReport` for bytes that are not a report at all (never a chain to check)."""
    if len(data) > MAX_REPORT_BYTES:
        raise NotAReport(f"{len(data):,} bytes, more than the {MAX_REPORT_BYTES:,} a report may hold")
    marker = f'"format": "{FORMAT}"'.encode()
    if len(data) > 2**20 and data.count(b",") * MIN_BYTES_PER_VALUE > len(data):
        raise NotAReport("not JSON in a report's shape (far more values than its size allows)")
    try:
        text = data.decode("utf-8")
        document = _loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        if marker in data:  # a report, damaged: it was altered
            where = _near(data, getattr(exc, "pos", None) if isinstance(exc, json.JSONDecodeError) else None)
            return Verification(
                0, f"it is no longer valid JSON{where} ({_short(exc)}): it was altered after export"
            )
        raise NotAReport(f"not JSON ({_short(exc)})") from None
    header = document.get("header") if isinstance(document, dict) else None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        if marker in data:  # the format is named, but not by a header: the report's shape was altered
            return Verification(0, "it has no header naming its format: it was altered after export")
        raise NotAReport(f"not a {FORMAT} (no header naming that format)")
    if header.get("version") != VERSION:
        raise NotAReport(f"a {FORMAT} of version {header.get('version')!r}; this version reads {VERSION}")
    entries = document.get("entries")
    if not isinstance(entries, list):
        return Verification(0, "its entries are not a list: it was altered after export")
    previous = _sha256(header)
    for number, entry in enumerate(entries, start=1):
        label = _label(entry, number)
        if not isinstance(entry, dict) or "hash" not in entry:
            return Verification(len(entries), f"{label} is not an entry: it was altered", number)
        if entry.get("previous") != previous:
            if number == 1:
                return Verification(
                    len(entries), "the header does not verify: it was altered, or the first entry removed"
                )
            problem = f"{label} does not follow the one before it: an entry was removed, added or reordered"
            return Verification(len(entries), problem, number)
        body = {key: value for key, value in entry.items() if key != "hash"}
        if entry.get("number") != number or _sha256(body) != entry["hash"]:
            return Verification(
                len(entries), f"{label} was altered: its hash does not match its content", number
            )
        previous = entry["hash"]
    if document.get("chain_end") != previous:
        problem = "the chain does not end where the export ended it: entries were removed or added at the end"
        if not entries:
            problem = "the header does not verify: it was altered"
        return Verification(len(entries), problem)
    counts = {verdict: sum(1 for e in entries if e.get("verdict") == verdict) for verdict in VERDICTS}
    if header.get("entries") != len(entries) or header.get("verdicts") != counts:
        return Verification(len(entries), "the header's counts do not match its entries: it was altered")
    if set(document) != {"header", "entries", "chain_end"}:
        return Verification(len(entries), "it holds fields the export did not write: it was altered")
    expected = dump_report(document).encode()
    if data != expected:
        offset = next((i for i, (a, b) in enumerate(zip(data, expected, strict=False)) if a != b), None)
        offset = min(len(data), len(expected)) if offset is None else offset
        return Verification(
            len(entries),
            f"the byte at offset {offset:,} differs from the exported form (a change JSON does not see, "
            "e.g. whitespace): it was altered after export",
        )
    return Verification(len(entries), verdicts=counts)


def _loads(text: str) -> Any:
    """``json.loads`` without NaN or infinities (the export never writes them), nested at most
    :data:`MAX_REPORT_DEPTH` levels (checked without recursion)."""
    document = json.loads(text, parse_constant=_no_constant, parse_float=_finite, parse_int=_integer)
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        if children and depth >= MAX_REPORT_DEPTH:
            raise ValueError(f"nested deeper than {MAX_REPORT_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)
    return document


def _no_constant(name: str) -> Any:
    raise ValueError(f"JSON has no {name}")


def _integer(text: str) -> int | str:
    """An integer; one too long for any count or index the export writes is kept as its digits (it then
    fails its entry's hash, naming the entry, instead of Python's limit on converting digits failing the
    whole parse)."""
    return int(text) if len(text) <= 40 else text


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is beyond a float")
    return value


def _near(data: bytes, position: int | None) -> str:
    """Where in the exported form a parse error is: the header, or the entry it is in (by the entries' opening
    lines, which the export indents by four spaces)."""
    if position is None:
        return ""
    text = data[: position + 1].decode("utf-8", errors="replace")
    if '\n  "header": {' in text:
        return " in the header"
    start = text.find('\n  "entries": [')
    number = text.count("\n    {\n", start) if start >= 0 else 0
    return f" near entry {number}" if number else ""


def _label(entry: Any, number: int) -> str:
    if isinstance(entry, dict):
        parts = [str(entry.get(key)) for key in ("dag_id", "task_id") if isinstance(entry.get(key), str)]
        where = f" on {entry['cluster']}" if isinstance(entry.get("cluster"), str) else ""
        if parts:
            return f"entry {number} ({'.'.join(parts)}{where})"
    return f"entry {number}"


def _short(exc: BaseException, limit: int = 120) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
