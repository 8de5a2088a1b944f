"""The gateway's replication state in /metrics: what is owed, what was repaired, how far behind.

    nearfaas_replica_hints_pending{node}            writes/deletes/buckets a node is owed (hints.py)
    nearfaas_replica_hints_replayed_total           hints honoured since start-up
    nearfaas_replica_keys_repaired_total{via}       replica copies made: read | hint | anti_entropy
    nearfaas_replica_convergence_lag_seconds        age of the oldest unrepaired difference (0: converged)
    nearfaas_replica_antientropy_passes_total       passes run; ..._skipped_total: skipped, a node was down
    nearfaas_replica_tombstones_purged_total        deletes forgotten once every replica had them
    nearfaas_replica_stale_reads_refused_total      reads answered 503 rather than older than a version owed
    nearfaas_storage_slowdowns_total{node}          calls refused with SlowDown (the node's call queue was full)
    nearfaas_replica_writes_waiting                 writes waiting to be acknowledged after an older one

Everything here is measured (counted by the gateway), nothing is modelled.
"""

from __future__ import annotations

import time

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class ReplicationCollector:
    def __init__(self, backend, anti_entropy):
        self.backend, self.anti_entropy = backend, anti_entropy

    def lag_seconds(self, now: float | None = None) -> float:
        now = time.time() if now is None else now
        starts = [t for t in (self.backend.hints.oldest(), self.anti_entropy.diverged_since) if t is not None]
        return max(0.0, now - min(starts)) if starts else 0.0

    def collect(self):
        hints, ae = self.backend.hints, self.anti_entropy
        pending = GaugeMetricFamily("nearfaas_replica_hints_pending", "Writes, deletes and buckets a storage node is owed",
                                    labels=["node"])
        owed = hints.pending()
        for node in self.backend.nodes.storage_nodes():
            pending.add_metric([node.name], owed.get(node.name, 0))
        yield pending
        yield CounterMetricFamily("nearfaas_replica_hints_replayed", "Hints honoured since start-up", value=hints.handed_off)
        repaired = CounterMetricFamily("nearfaas_replica_keys_repaired", "Replica copies made, by what found them", labels=["via"])
        for via, n in sorted(self.backend.repairer.repaired.items()):
            repaired.add_metric([via], n)
        yield repaired
        yield GaugeMetricFamily("nearfaas_replica_convergence_lag_seconds",
                                "Age of the oldest known difference between replicas (0 when converged)", value=self.lag_seconds())
        yield CounterMetricFamily("nearfaas_replica_antientropy_passes", "Anti-entropy passes run", value=ae.passes)
        yield CounterMetricFamily("nearfaas_replica_antientropy_skipped", "Anti-entropy passes skipped (a node was down)",
                                  value=ae.skipped)
        yield CounterMetricFamily("nearfaas_replica_tombstones_purged", "Tombstones forgotten once every replica had them",
                                  value=ae.tombstones_purged)
        yield CounterMetricFamily("nearfaas_replica_stale_reads_refused", "Reads answered 503 rather than with a version older "
                                  "than one a replica is owed", value=self.backend.stale_reads_refused)
        slow = CounterMetricFamily("nearfaas_storage_slowdowns", "Calls refused with SlowDown: the node's call queue was full",
                                   labels=["node"])
        for node, n in sorted(self.backend.slowdowns().items()):
            slow.add_metric([node], n)
        yield slow
        yield GaugeMetricFamily("nearfaas_replica_writes_waiting", "Writes in flight, waiting to be acknowledged in version order",
                                value=self.backend.order.pending())
