"""HAProxy's configuration for many gateways (cluster/balancer.py), and whose address a gateway
believes (gateway/client_identity.py)."""

from __future__ import annotations

from types import SimpleNamespace

from nearfaas.cluster import balancer
from nearfaas.gateway.client_identity import CLIENT_HEADER, peer_address


def test_the_balancer_checks_every_gateway_and_reaches_them_where_it_can_say_who_called():
    cfg = balancer.config("127.0.0.1", 8080, [{"id": "gw", "port": 41001, "socket": "/s/gateway/balancer.sock"},
                                              {"id": "gw1", "port": 41002}], 60.0)
    assert "bind 127.0.0.1:8080" in cfg and "option httpchk GET /healthz" in cfg
    assert "server gw unix@/s/gateway/balancer.sock check" in cfg  # the client address is believed there
    assert "server gw1 127.0.0.1:41002 check" in cfg  # a path too long for a socket: TCP
    assert f"http-request set-header {CLIENT_HEADER} %[src]" in cfg  # replaces whatever a client sent
    assert "retry-on conn-failure" in cfg and "option redispatch" in cfg


def _request(sockname, remote, headers):
    return SimpleNamespace(transport=SimpleNamespace(get_extra_info=lambda key: sockname if key == "sockname" else None),
                           remote=remote, headers=headers)


def test_a_gateway_believes_the_balancers_client_address_only_over_its_socket():
    told = {CLIENT_HEADER: "203.0.113.7"}
    assert peer_address(_request("/s/gateway/balancer.sock", "", told)) == "203.0.113.7"
    assert peer_address(_request(("127.0.0.1", 41001), "198.51.100.2", told)) == "198.51.100.2"  # TCP: a forged header
    assert peer_address(_request("/s/gateway/balancer.sock", "", {})) is None
