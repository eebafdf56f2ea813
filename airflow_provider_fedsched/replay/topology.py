"""The federation a workload is replayed on: nodes split into member clusters in regions, with prices,
egress, datasets (some sovereign), each pod's home cluster, and the tidal curve of online services.

Everything is derived from the seed by documented rules (``docs/replay.md``), so the same inputs give the
same federation. The result is a real :class:`FederationSpec` with the production policy defaults, which
the engine receives unchanged.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_provider_fedsched.federation import FederationSpec, PolicySpec, load_spec, resources
from airflow_provider_fedsched.replay.workload import Node, ReplayInputError, Task

__all__ = [
    "GPU_MILLI",
    "MAX_REPLAY_CLUSTERS",
    "REGIONS",
    "Federation",
    "Region",
    "Tide",
    "build_federation",
]

MAX_REPLAY_CLUSTERS = 1_000
"""Member clusters the nodes are split into (``--clusters``): the engine is benchmarked at 1,000."""
GPU_MILLI = resources.GPU_MILLI
"""The replay's GPU resource, in thousandths of a GPU, so that the trace's GPU-sharing pods can be placed
(an extended resource, priced per unit-hour at a thousandth of the GPU-hour price)."""
GPU_SPEC_LABEL = "replay.fedsched.io/gpu-spec-"
"""Node label prefix: nodes whose GPU model is one of a pod's ``gpu_spec`` types carry
``<prefix><spec>=true``, so the pod's set of allowed types is an exact equality node selector."""


@dataclass(frozen=True, slots=True)
class Region:
    name: str
    group: str
    utc_offset_hours: int
    price_factor: float
    egress_gb: float


REGIONS: tuple[Region, ...] = (
    Region("cn-hangzhou", "cn-east", 8, 1.00, 0.08),
    Region("cn-shanghai", "cn-east", 8, 1.06, 0.08),
    Region("cn-beijing", "cn-north", 8, 0.94, 0.09),
    Region("ap-singapore", "ap-southeast", 8, 1.10, 0.12),
    Region("eu-frankfurt", "eu-central", 1, 1.18, 0.09),
    Region("us-virginia", "us-east", -5, 0.90, 0.09),
    Region("cn-shenzhen", "cn-south", 8, 0.97, 0.08),
    Region("eu-london", "eu-central", 0, 1.22, 0.09),
)
"""Member regions in order: the first ``N`` are used for ``N`` clusters (cycling past eight)."""

BASE_PRICES = {"cpu_hour": 0.04, "memory_gib_hour": 0.005, "gpu_hour": 2.0}


@dataclass(frozen=True, slots=True)
class Tide:
    """The day/night curve of online services: their usage as a fraction of their requests,
    ``low + (high - low) * (1 + cos(2 pi (local hour - peak) / 24)) / 2`` in the cluster's local time."""

    low: float = 0.25
    high: float = 0.85
    peak_hour: float = 14.0
    start_hour_utc: float = 0.0
    """Hour of day (UTC) at replay time 0."""

    def usage(self, seconds: float, utc_offset_hours: float) -> float:
        hour = (self.start_hour_utc + seconds / 3600.0 + utc_offset_hours) % 24.0
        wave = (1.0 + math.cos(2.0 * math.pi * (hour - self.peak_hour) / 24.0)) / 2.0
        return self.low + (self.high - self.low) * wave


@dataclass(slots=True)
class Federation:
    spec: FederationSpec
    clusters: dict[str, list[Node]]
    """Cluster name -> its nodes, in spec order."""
    offsets: dict[str, int]
    """Cluster name -> UTC offset (hours) of its region, for the tide."""
    tasks: list[Task]
    """The workload with home clusters and datasets assigned."""
    tide: Tide = field(default_factory=Tide)
    gpu_taint: bool = False
    """GPU nodes are tainted (``nvidia.com/gpu=present:NoSchedule``) and only GPU pods tolerate it."""

    @property
    def names(self) -> list[str]:
        return [cluster.name for cluster in self.spec.clusters]


def _cluster_documents(count: int, labels: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    documents = []
    for index in range(count):
        region = REGIONS[index % len(REGIONS)]
        suffix = "" if index < len(REGIONS) else f"-{index // len(REGIONS)}"
        factor = region.price_factor
        documents.append(
            {
                "name": f"{region.name}{suffix}",
                "conn_id": f"replay_{region.name}{suffix}".replace("-", "_"),
                "region": region.name,
                "group": region.group,
                "labels": dict(labels[index]),
                # The binder packs GPUs (``ClusterState.pick_node``), as GPU clusters configure it.
                "scoring_strategy": {"type": "MostAllocated", "resources": [GPU_MILLI]},
                "prices": {
                    "cpu_hour": round(BASE_PRICES["cpu_hour"] * factor, 5),
                    "memory_gib_hour": round(BASE_PRICES["memory_gib_hour"] * factor, 6),
                    "gpu_hour": round(BASE_PRICES["gpu_hour"] * factor, 4),
                    "egress_gb": region.egress_gb,
                    "extended": {GPU_MILLI: round(BASE_PRICES["gpu_hour"] * factor / 1000, 7)},
                },
            }
        )
    return documents


def split_nodes(nodes: Sequence[Node], count: int, seed: int) -> list[list[Node]]:
    """Nodes named with a cluster keep it; the others are shuffled (seeded) and dealt out in turn, so that
    every cluster gets a similar mix of node types."""
    if not 1 <= count <= MAX_REPLAY_CLUSTERS:
        raise ReplayInputError(f"--clusters: must be 1..{MAX_REPLAY_CLUSTERS:,} (got {count})")
    rng = random.Random(seed)
    order = list(nodes)
    rng.shuffle(order)
    groups: list[list[Node]] = [[] for _ in range(count)]
    for position, node in enumerate(order):
        groups[position % count].append(node)
    for group in groups:
        group.sort(key=lambda node: node.name)
    return groups


def home_weights(count: int, skew: float) -> list[float]:
    """Share of the pods submitted to each cluster: ``1 / (rank + 1) ** skew``, normalized (skew 0 is
    balanced; the default 1 sends about 48 % of four clusters' pods to the first)."""
    raw = [1.0 / (rank + 1) ** skew for rank in range(count)]
    total = sum(raw)
    return [value / total for value in raw]


def build_federation(
    nodes: Sequence[Node],
    tasks: Sequence[Task],
    *,
    clusters: int,
    seed: int,
    skew: float = 1.0,
    data_share: float = 0.2,
    sovereign_share: float = 0.5,
    tide: Tide | None = None,
    spec: FederationSpec | None = None,
    keep_clusters: bool = False,
) -> Federation:
    """Split ``nodes`` into clusters, build the spec, and give each task a home and (for ``data_share`` of
    them) a dataset on that home, restricted to the home's region for ``sovereign_share`` of the datasets.

    With ``spec`` (a user's federation) the nodes must name their clusters and the tasks their homes
    may name members; its datasets and policy are used as they are.
    """
    if spec is not None:
        return _with_spec(spec, nodes, tasks, seed, tide or Tide())
    if keep_clusters:
        named = [document["name"] for document in _cluster_documents(clusters, [{}] * clusters)]
        groups = [[node for node in nodes if node.cluster == name] for name in named]
    else:
        groups = split_nodes(nodes, clusters, seed)
    labels = [{"gpu": str(any(node.gpus for node in group)).lower()} for group in groups]
    documents = _cluster_documents(clusters, labels)
    names = [document["name"] for document in documents]
    rng = random.Random(seed + 1)
    datasets: list[dict[str, Any]] = []
    per_cluster = 4
    for document in documents:
        for number in range(per_cluster):
            sovereign = number < round(per_cluster * sovereign_share)
            datasets.append(
                {
                    "name": f"data-{document['name']}-{number}",
                    "cluster": document["name"],
                    "size_gb": float(rng.choice((20, 50, 100, 200))),
                    "allowed_regions": [document["region"]] if sovereign else None,
                }
            )
    weights = home_weights(clusters, skew)
    assigned: list[Task] = []
    for task in tasks:
        home = task.home if task.home in names else rng.choices(names, weights)[0]
        reads: tuple[str, ...] = task.datasets
        if not reads and not task.online and rng.random() < data_share:
            reads = (f"data-{home}-{rng.randrange(per_cluster)}",)
        assigned.append(replace(task, home=home, datasets=reads))
    federation_spec = FederationSpec.model_validate(
        {"name": "replay", "clusters": documents, "datasets": datasets, "policy": PolicySpec().model_dump()}
    )
    offsets = {name: REGIONS[index % len(REGIONS)].utc_offset_hours for index, name in enumerate(names)}
    nodes_by_cluster = dict(zip(names, groups, strict=True))
    _check_datasets(federation_spec, assigned)
    return Federation(federation_spec, nodes_by_cluster, offsets, assigned, tide or Tide())


def _with_spec(
    spec: FederationSpec, nodes: Sequence[Node], tasks: Sequence[Task], seed: int, tide: Tide
) -> Federation:
    names = [cluster.name for cluster in spec.clusters]
    groups: dict[str, list[Node]] = {name: [] for name in names}
    for node in nodes:
        if node.cluster is None:
            raise ReplayInputError(f"node {node.name}: with --federation every node needs a cluster column")
        if node.cluster not in groups:
            raise ReplayInputError(
                f"node {node.name}: cluster '{node.cluster}' is not a member (members: {', '.join(names)})"
            )
        groups[node.cluster].append(node)
    rng = random.Random(seed + 1)
    assigned = []
    for task in tasks:
        if task.home is not None and task.home not in groups:
            raise ReplayInputError(
                f"pod {task.name}: cluster '{task.home}' is not a member (members: {', '.join(names)})"
            )
        assigned.append(task if task.home is not None else replace(task, home=rng.choice(names)))
    _check_datasets(spec, assigned)
    offsets = {}
    known = {region.name: region.utc_offset_hours for region in REGIONS}
    for cluster in spec.clusters:
        offsets[cluster.name] = known.get(cluster.region, 0)
    return Federation(spec, groups, offsets, assigned, tide)


def _check_datasets(spec: FederationSpec, tasks: Sequence[Task]) -> None:
    known = {dataset.name for dataset in spec.datasets}
    for task in tasks:
        for name in task.datasets:
            if name not in known:
                raise ReplayInputError(
                    f"pod {task.name}: datasets: unknown dataset '{name}' (known: {', '.join(sorted(known))})"
                )


def load_federation_spec(path: str) -> FederationSpec:
    from airflow_provider_fedsched.federation import SpecError

    try:
        return load_spec(path)
    except SpecError as exc:
        raise ReplayInputError(f"--federation {path}: {exc}") from None
