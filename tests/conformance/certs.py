"""Certificates made for a test with openssl (Debian's): a CA, a server certificate for
`localhost` (and 127.0.0.1), and client certificates, each signed by the CA given."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=cwd)


@dataclass
class Pair:
    cert: Path
    key: Path


def ca(folder: Path, name: str = "ca") -> Pair:
    folder.mkdir(parents=True, exist_ok=True)
    key, cert = folder / f"{name}.key", folder / f"{name}.crt"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", str(key),
             "-out", str(cert), "-subj", f"/CN={name} test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)
    return Pair(cert, key)


def signed(folder: Path, name: str, by: Pair, server: bool, serial: int = 1,
           names: tuple[str, ...] = ("DNS:localhost", "IP:127.0.0.1"), days: int = 2,
           client_too: bool = False) -> Pair:
    """A certificate signed by `by`, for `names` (`localhost` and 127.0.0.1 unless told), valid
    `days`: a server's (serverAuth; with `client_too`, clientAuth as well) or a client's
    (clientAuth)."""
    key, csr, cert = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.crt"
    ext = folder / f"{name}.ext"
    usage = ("serverAuth,clientAuth" if client_too else "serverAuth") if server else "clientAuth"
    ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                   f"extendedKeyUsage={usage}\nsubjectAltName={','.join(names)}\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
             "-subj", f"/CN=localhost/OU={name}", cwd=folder)
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(by.cert), "-CAkey", str(by.key),
             "-set_serial", str(serial), "-days", str(days), "-out", str(cert), "-extfile", str(ext),
             cwd=folder)
    return Pair(cert, key)
