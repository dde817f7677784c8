"""Prometheus metrics of one app: requests by route and status, latency by route, and (read from
the store at scrape time) jobs by status and trials by target and status."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func
from sqlmodel import select

from advisor.errors import AdvisorError
from knowledge import TrialRecord, TrialStore
from knowledge.jobs import JobStore

__all__ = ["CONTENT_TYPE", "ApiMetrics"]

log = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _StoreCollector(Collector):
    def __init__(self, store: TrialStore) -> None:
        self.store, self.jobs = store, JobStore(store)

    def collect(self) -> Iterator[Metric]:
        try:
            jobs = self.jobs.count_by_status()
            with self.store.session() as s:
                q = select(TrialRecord.target, TrialRecord.status, func.count()).group_by(
                    TrialRecord.target, TrialRecord.status)
                trials = list(s.exec(q))
        except AdvisorError as exc:
            log.warning("metrics: store unavailable: %s", exc)
            return
        g = GaugeMetricFamily("advisor_jobs", "Study jobs by status", labels=["status"])
        for status, n in jobs.items():
            g.add_metric([status], n)
        yield g
        t = GaugeMetricFamily("advisor_trials", "Stored trials by target and status",
                              labels=["target", "status"])
        for target, status, n in trials:
            t.add_metric([target, status], int(n))
        yield t


class ApiMetrics:
    """A registry per app (several apps in one process, as in tests, do not collide)."""

    def __init__(self, store: TrialStore) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("advisor_http_requests", "HTTP requests",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("advisor_http_request_duration_seconds",
                                 "Time to answer an HTTP request", ["method", "route"],
                                 buckets=_BUCKETS, registry=self.registry)
        self.registry.register(_StoreCollector(store))

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
