"""HTTP/2 spoken frame by frame, for tests that must send what a well-behaved client library
never sends (a flood of stream errors) or read what it hides (the server's SETTINGS, a GOAWAY's
code and reason). Only what those tests need: the preface, SETTINGS, HEADERS (HPACK from the
`hpack` package), WINDOW_UPDATE, PING replies, and a frame reader."""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
SETTINGS_MAX_CONCURRENT_STREAMS = 0x3
ENHANCE_YOUR_CALM = 0xB


@dataclass
class Frame:
    kind: int
    flags: int
    stream: int
    payload: bytes

    def settings(self) -> dict:
        return {ident: value for ident, value in
                (struct.unpack(">HI", self.payload[i:i + 6]) for i in range(0, len(self.payload), 6))}

    def goaway(self) -> tuple[int, int, bytes]:
        """(last stream, error code, debug data)."""
        last, code = struct.unpack(">II", self.payload[:8])
        return last & 0x7FFFFFFF, code, self.payload[8:]


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


class Connection:
    """A client connection that has sent the preface and an empty SETTINGS."""

    def __init__(self, hostport: str, timeout: float = 10.0):
        host, _, port = hostport.rpartition(":")
        self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
        self.buf = b""
        self.encoder = hpack.Encoder()
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0))

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def headers(self, stream: int, path: str, end_stream: bool = False,
                extra: tuple = ()) -> bytes:
        """A HEADERS frame opening a gRPC call on `stream` (the frame, to send or to batch)."""
        block = self.encoder.encode([
            (":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "test"),
            ("content-type", "application/grpc"), ("te", "trailers"), *extra,
        ])
        flags = END_HEADERS | (END_STREAM if end_stream else 0)
        return frame(HEADERS, flags, stream, block)

    def read_frame(self, deadline: float) -> Frame | None:
        """The next frame, or None when the connection ends; TimeoutError past `deadline`.
        PINGs are answered on the way, as every client does."""
        while True:
            while len(self.buf) < 9 or len(self.buf) < 9 + int.from_bytes(self.buf[:3], "big"):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("no frame before the deadline")
                self.sock.settimeout(remaining)
                try:
                    chunk = self.sock.recv(65536)
                except (ConnectionResetError, BrokenPipeError):
                    return None
                if not chunk:
                    return None
                self.buf += chunk
            length = int.from_bytes(self.buf[:3], "big")
            kind, flags = self.buf[3], self.buf[4]
            stream = struct.unpack(">I", self.buf[5:9])[0] & 0x7FFFFFFF
            payload, self.buf = self.buf[9:9 + length], self.buf[9 + length:]
            if kind == PING and not flags & ACK:
                self.send(frame(PING, ACK, 0, payload))
            return Frame(kind, flags, stream, payload)

    def server_settings(self, timeout: float = 10.0) -> dict:
        """The server's first SETTINGS (acknowledged)."""
        deadline = time.monotonic() + timeout
        while True:
            f = self.read_frame(deadline)
            if f is None:
                raise ConnectionError("the connection ended before the server's SETTINGS")
            if f.kind == SETTINGS and not f.flags & ACK:
                self.send(frame(SETTINGS, ACK, 0))
                return f.settings()

    def wait_for_goaway(self, timeout: float) -> Frame | None:
        """The server's GOAWAY, or None if the connection ended without one; TimeoutError if
        neither came within `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            f = self.read_frame(deadline)
            if f is None or f.kind == GOAWAY:
                return f
