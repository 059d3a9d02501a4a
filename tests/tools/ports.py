"""Free ports for the servers tests and benchmarks start on fixed ports.

The ports come from below the kernel's ephemeral range. A port the kernel hands out for `bind(0)`
lies inside that range, and once the probing socket is closed any outgoing connection may take it
as its source port before the server binds it: a sidecar dialling peers that are not up yet does
exactly that, and the next peer then fails with "address already in use". The kernel never picks
a source port below the range, so only another explicit binder can take one of these.
"""

import random
import socket

_LOWEST = 10000


def _ephemeral_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    """Whether `port` is free on every address a server may take it on: the IPv6 wildcard (which
    the sidecar binds by default, dual-stack where the host allows) and IPv4 loopback."""
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "127.0.0.1")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((host, port))
        except OSError as err:
            if family == socket.AF_INET6 and not socket.has_ipv6:
                continue
            if family == socket.AF_INET6 and err.errno in (97, 99):  # no IPv6 on this host
                continue
            return False
    return True


def free_ports(n: int) -> list[int]:
    """`n` distinct ports that are free now and that the kernel will not hand out as source
    ports."""
    high = _ephemeral_start() - 1
    if high <= _LOWEST + n:
        raise RuntimeError(f"the ephemeral range starts at {high + 1}: no room below it for {n} ports")
    chosen: list[int] = []
    for port in random.sample(range(_LOWEST, high + 1), k=min(4096, high + 1 - _LOWEST)):
        if _bindable(port):
            chosen.append(port)
            if len(chosen) == n:
                return chosen
    raise RuntimeError(f"no {n} free ports between {_LOWEST} and {high}")
