"""What the daemon tells Prometheus at /metrics: its counts, gauges and the
time from a file's save to its points being written."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.documents = Gauge("mdindex_documents", "Documents indexed", registry=r)
        self.points = Gauge("mdindex_points", "Points in the collection", registry=r)
        self.queue_depth = Gauge("mdindex_queue_depth", "Paths waiting to be indexed", registry=r)
        self.embedded = Counter("mdindex_chunks_embedded", "Chunks embedded", registry=r)
        self.upserted = Counter("mdindex_points_upserted", "Points written", registry=r)
        self.deleted = Counter("mdindex_points_deleted", "Points deleted", registry=r)
        self.errors = Counter("mdindex_errors", "Files that failed and store errors", registry=r)
        self.rescans = Counter("mdindex_rescans", "Full rescans run", registry=r)
        self.last_sync = Gauge(
            "mdindex_last_sync_timestamp_seconds",
            "Unix time of the last successful sync",
            registry=r,
        )
        self.healthy = Gauge("mdindex_healthy", "1 when watching and the store answers", registry=r)
        self.latency = Histogram(
            "mdindex_save_to_indexed_seconds",
            "From a file's modification time to its points being written",
            buckets=(0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60, 300),
            registry=r,
        )
