"""Free loopback ports for the servers tests and benchmarks start on fixed ports."""

import socket


def free_ports(n: int) -> list[int]:
    """`n` distinct free loopback ports, chosen by the kernel (bound together so they differ)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports
