"""Prometheus metrics of the gateway, with OpenFaaS's names so existing dashboards work.

Every value here is *measured* on the live platform; modelled numbers live in the twin and are
never exported under these names.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Buckets reach down to 100 us: a warm call here is sub-millisecond, a cold start is seconds.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.invocations = Counter("gateway_function_invocation", "Function invocations by status code (measured)",
                                   ["function_name", "code"], registry=r)
        self.seconds = Histogram("gateway_functions_seconds", "Function call duration seen by the gateway (measured)",
                                 ["function_name"], buckets=LATENCY_BUCKETS, registry=r)
        self.service_count = Gauge("gateway_service_count", "Warm replicas per function", ["function_name"], registry=r)
        self.cold_starts = Counter("nearfaas_cold_starts", "Worker cold starts (spawn + import + init)",
                                   ["function_name", "node"], registry=r)
        self.cold_start_seconds = Histogram("nearfaas_cold_start_seconds", "Cold start duration (measured)",
                                            ["function_name"], buckets=LATENCY_BUCKETS, registry=r)
        self.inflight = Gauge("nearfaas_inflight", "Calls in flight per function", ["function_name"], registry=r)
        self.placements = Counter("nearfaas_placement", "Placement decisions", ["function", "target", "reason"], registry=r)
        self.link_bytes = Counter("nearfaas_link_bytes", "Object bytes that crossed the emulated compute<->storage link",
                                  ["link", "direction", "function_name"], registry=r)
        self.timing = Histogram("nearfaas_call_seconds", "Where a call's time went: stack, data, compute, cold_start (measured)",
                                ["function_name", "part"], buckets=LATENCY_BUCKETS, registry=r)
        self.chains = Counter("nearfaas_chain_calls", "Chain (application) calls by outcome", ["app", "outcome"], registry=r)
        self.triggers = Counter("nearfaas_trigger_calls", "Calls queued by object-PUT triggers", ["function_name"], registry=r)
        self.async_queue = Gauge("nearfaas_async_queue_depth", "Async calls waiting or running", registry=r)
        self.async_resumed = Counter("nearfaas_async_resumed", "Async calls found not done in the journal at start-up and run again",
                                     registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def add_collector(self, collector) -> None:
        self.registry.register(collector)


class BitarCollector:
    """Bitar transfers in /metrics (measured): objects sent compressed, and their bytes before
    and on the wire (bitar/transfer.py).

        nearfaas_bitar_transfers_total            GETs that opted in and were sent as gzip members
        nearfaas_bitar_bytes_total{kind}          raw: object bytes; wire: bytes sent
    """

    def __init__(self, counters):
        self.counters = counters

    def collect(self):
        from prometheus_client.core import CounterMetricFamily

        yield CounterMetricFamily("nearfaas_bitar_transfers", "Object GETs sent compressed (Bitar, gzip content coding)",
                                  value=self.counters.transfers)
        family = CounterMetricFamily("nearfaas_bitar_bytes", "Bytes of Bitar transfers: raw object bytes and bytes on the wire",
                                     labels=["kind"])
        family.add_metric(["raw"], self.counters.raw)
        family.add_metric(["wire"], self.counters.wire)
        yield family
