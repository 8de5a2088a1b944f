"""backend: ray: where the gateway's nodes are, asked of Ray, off every call's path.

Each node runs as a named actor of the cluster's Ray namespace (cluster/ray_actors.py). Every
``interval_s`` this task asks each actor ``describe()`` and moves the node's URL in the
``NodeDirectory`` when it changed (a restart on another host, or the first answer after
start-up: the gateway is given no static port list). Health then comes from two places: an
actor Ray cannot find or that does not answer keeps its node out of placement at once
(``Node.actor_down``), and an actor that answers still needs its node's HTTP health poll to pass
(gateway/nodes.py). Calls never wait on Ray: they use the URL last found.

Worked example: storage-1's host leaves the Ray cluster. Within ``interval_s`` its actor stops
answering: storage-1 is down for placement (reads go to the other replica, writes leave hints).
Ray restarts the actor on another host offering ``nearfaas_storage``; its first answer gives a
new URL, the health poll passes, and hinted handoff and anti-entropy refill its store.

Known caveats:
- The gateway joins Ray as a driver at start (about a second, and Ray's client threads in the
  gateway's process); a gateway that cannot reach Ray keeps the URLs it had and says so in
  each node's ``last_error``.
"""

from __future__ import annotations

import asyncio

from nearfaas.gateway.nodes import NodeDirectory

INTERVAL_S = 1.0
ANSWER_TIMEOUT_S = 2.0


class RayNodes:
    def __init__(self, nodes: NodeDirectory, address: str, namespace: str, interval_s: float = INTERVAL_S):
        self.nodes, self.address, self.namespace, self.interval_s = nodes, address, namespace, interval_s
        self._handles: dict = {}
        self.ray = None

    def connect(self) -> None:
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, namespace=self.namespace, log_to_driver=False, configure_logging=False)
        self.ray = ray

    async def locate_all(self) -> None:
        await asyncio.gather(*(self._locate(name) for name in self.nodes.nodes))

    async def _locate(self, name: str) -> None:
        node = self.nodes.nodes[name]
        try:
            handle = self._handles.get(name)
            if handle is None:
                handle = self._handles[name] = await asyncio.to_thread(self.ray.get_actor, name, self.namespace)
            info = await asyncio.wait_for(asyncio.wrap_future(handle.describe.remote().future()), ANSWER_TIMEOUT_S)
        except ValueError:
            node.actor, node.actor_down = None, f"Ray has no actor named {name!r} in namespace {self.namespace!r}"
        except TimeoutError:
            node.actor_down = f"its Ray actor did not answer within {ANSWER_TIMEOUT_S:g}s"
        except Exception as exc:  # RayActorError and kin: the actor died or is restarting
            self._handles.pop(name, None)
            node.actor_down = f"its Ray actor is not alive ({type(exc).__name__})"
        else:
            self.nodes.relocate(name, info["url"])
            node.actor, node.actor_down = info, ""

    async def run_forever(self) -> None:
        while True:
            await self.locate_all()
            await asyncio.sleep(self.interval_s)
