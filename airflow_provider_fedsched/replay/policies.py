"""Placement policies: the baselines a federation could use instead, and fedsched (the real engine).

A baseline *routes* each pod once, when it arrives, as a push-based federation (KubeFed, replica-weighted
Karmada) propagates a workload: the pod then waits in that member cluster until it fits there. fedsched
decides with :class:`FederationEngine` and waits at the federation when no cluster can take the task now;
a decision proven wrong (the pod stays unschedulable, the snapshot was stale) cools the cluster down and
fails over, as the operator does. Every policy sees the same snapshots (same age).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from airflow_provider_fedsched.federation import FederationSpec
from airflow_provider_fedsched.replay.cluster import node_admits
from airflow_provider_fedsched.replay.topology import GPU_MILLI
from airflow_provider_fedsched.replay.workload import ReplayInputError, Task

__all__ = ["BASELINES", "POLICIES", "ClusterInfo", "Pricing", "Router", "make_router"]

BASELINES = ("home", "round-robin", "random", "least-loaded", "cheapest", "static-labels")
POLICIES = (*BASELINES, "fedsched", "fedsched+colocation")
MIB_PER_GIB = 1024


@dataclass(slots=True)
class ClusterInfo:
    """What a baseline knows of a cluster: its snapshot's per-node free resources and totals."""

    name: str
    free: list[tuple[int, int, int, dict[str, str]]]
    capacity: tuple[int, int, int]
    could_fit: bool
    """Some node could ever hold the task (its shape and GPU type)."""

    def fits_now(self, task: Task) -> bool:
        for cpu, memory, gpu, labels in self.free:
            if (
                task.cpu <= cpu
                and task.memory_mib <= memory
                and task.gpu_milli <= gpu
                and node_admits(task, labels)
            ):
                return True
        return False

    def available_replicas(self, task: Task) -> float:
        """How many copies of the task the cluster's total free resources hold (Karmada's estimate
        without its node-level estimator)."""
        totals = [
            sum(cpu for cpu, _, _, _ in self.free),
            sum(memory for _, memory, _, _ in self.free),
            sum(gpu for _, _, gpu, _ in self.free),
        ]
        asks = (task.cpu, task.memory_mib, task.gpu_milli)
        return min((total / ask for total, ask in zip(totals, asks, strict=True) if ask), default=0.0)


class Pricing:
    """Prices of the spec, looked up once: compute per request-hour and egress per dataset read."""

    def __init__(self, spec: FederationSpec) -> None:
        self._per_hour = {
            c.name: (c.prices.cpu_hour, c.prices.memory_gib_hour, c.prices.extended.get(GPU_MILLI, 0.0))
            for c in spec.clusters
        }
        egress = {c.name: c.prices.egress_gb for c in spec.clusters}
        self._datasets = {
            d.name: (d.cluster, d.size_gb, d.size_gb * egress[d.cluster])
            for d in spec.datasets
            if d.cluster is not None  # always, in a loaded spec: only an asset's dataset may have none
        }
        self._regions = {c.name: c.region for c in spec.clusters}
        self._allowed = {d.name: d.allowed_regions for d in spec.datasets}

    def compute(self, cluster: str, task: Task, seconds: float) -> float:
        cpu, memory, gpu = self._per_hour[cluster]
        per_hour = task.cpu / 1000 * cpu + task.memory_mib / MIB_PER_GIB * memory + task.gpu_milli * gpu
        return per_hour * seconds / 3600.0

    def egress(self, cluster: str, task: Task) -> tuple[float, float]:
        """(GB read from other clusters, their egress cost) when ``task`` runs on ``cluster``."""
        gigabytes = cost = 0.0
        for name in task.datasets:
            home, size, price = self._datasets[name]
            if home != cluster:
                gigabytes += size
                cost += price
        return gigabytes, cost

    def violates(self, cluster: str, task: Task) -> bool:
        """Running ``task`` on ``cluster`` takes a dataset where its sovereignty rule forbids."""
        region = self._regions[cluster]
        for name in task.datasets:
            allowed = self._allowed[name]
            if allowed is not None and region not in allowed:
                return True
        return False


class Router(Protocol):
    name: str

    def route(self, task: Task, clusters: Sequence[ClusterInfo]) -> str | None:
        """The member cluster the pod is sent to, or None when no cluster could ever hold it."""


class Home:
    name = "home"

    def route(self, task: Task, clusters: Sequence[ClusterInfo]) -> str | None:
        home = next((c for c in clusters if c.name == task.home), None)
        return home.name if home is not None and home.could_fit else None


class RoundRobin:
    name = "round-robin"

    def __init__(self) -> None:
        self._next = 0

    def route(self, task: Task, clusters: Sequence[ClusterInfo]) -> str | None:
        for step in range(len(clusters)):
            cluster = clusters[(self._next + step) % len(clusters)]
            if cluster.could_fit:
                self._next = (self._next + step + 1) % len(clusters)
                return cluster.name
        return None


class Random:
    name = "random"

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def route(self, task: Task, clusters: Sequence[ClusterInfo]) -> str | None:
        eligible = [c.name for c in clusters if c.could_fit]
        return self._rng.choice(eligible) if eligible else None


class LeastLoaded:
    name = "least-loaded"

    def route(self, task: Task, clusters: Sequence[ClusterInfo]) -> str | None:
        eligible = [c for c in clusters if c.could_fit]
        if not eligible:
            return None
        return max(eligible, key=lambda c: (c.available_replicas(task), c.name)).name


class Cheapest:
    """The cheapest cluster (compute for the run plus egress) where the pod fits now, else the cheapest
    that could ever hold it."""

    name = "cheapest"

    def __init__(self, pricing: Pricing) -> None:
        self._pricing = pricing

    def route(self, task: Task, clusters: Sequence[ClusterInfo]) -> str | None:
        eligible = [c for c in clusters if c.could_fit]
        if not eligible:
            return None

        def price(cluster: ClusterInfo) -> tuple[float, str]:
            compute = self._pricing.compute(cluster.name, task, task.run)
            return compute + self._pricing.egress(cluster.name, task)[1], cluster.name

        fitting = [c for c in eligible if c.fits_now(task)]
        return min(fitting or eligible, key=price).name


class StaticLabels:
    """GPU pods to clusters labelled ``gpu=true``, others anywhere; the first (spec order) where the pod
    fits now, else the first eligible."""

    name = "static-labels"

    def __init__(self, spec: FederationSpec) -> None:
        self._gpu = {c.name for c in spec.clusters if c.labels.get("gpu") == "true"}

    def route(self, task: Task, clusters: Sequence[ClusterInfo]) -> str | None:
        eligible = [c for c in clusters if c.could_fit and (not task.gpu_milli or c.name in self._gpu)]
        if not eligible:
            return None
        return next((c.name for c in eligible if c.fits_now(task)), eligible[0].name)


def make_router(name: str, spec: FederationSpec, pricing: Pricing, seed: int) -> Router:
    if name == "home":
        return Home()
    if name == "round-robin":
        return RoundRobin()
    if name == "random":
        return Random(seed)
    if name == "least-loaded":
        return LeastLoaded()
    if name == "cheapest":
        return Cheapest(pricing)
    if name == "static-labels":
        return StaticLabels(spec)
    raise ReplayInputError(f"--policies: unknown baseline '{name}' (known: {', '.join(POLICIES)})")
