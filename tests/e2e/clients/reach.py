"""Which ports a pod reaches: a TCP connection to each target, and an HTTP GET for some, all at
once, each within a few seconds. A port that a NetworkPolicy drops gives "timeout" (its SYN is
dropped); one that nothing listens on, "ConnectionRefusedError".

Run inside the client image (passed to `python3 -` on standard input):

    reach.py [--tcp NAME=HOST:PORT ...] [--get NAME=URL ...]

The last line printed is a JSON object: for each NAME, "accepted", "timeout" or the error's
name (--tcp), or [HTTP status, the answer's text (up to 200 characters)] or the error's name
(--get).
"""

import argparse
import json
import socket
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

TIMEOUT = 4


def connect(target):
    host, port = target.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=TIMEOUT):
            return "accepted"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return type(e).__name__


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as r:
            return [r.status, r.read().decode(errors="replace")[:200]]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode(errors="replace")[:200]]
    except (socket.timeout, TimeoutError):
        return "timeout"
    except urllib.error.URLError as e:
        reason = e.reason
        return "timeout" if isinstance(reason, (socket.timeout, TimeoutError)) \
            else type(reason).__name__


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tcp", action="append", default=[])
    parser.add_argument("--get", action="append", default=[])
    args = parser.parse_args()
    calls = [(name, connect, target) for name, target in (t.split("=", 1) for t in args.tcp)]
    calls += [(name, get, url) for name, url in (t.split("=", 1) for t in args.get)]
    with ThreadPoolExecutor(max_workers=32) as pool:
        answers = pool.map(lambda call: call[1](call[2]), calls)
        print(json.dumps({name: answer for (name, _, _), answer in zip(calls, answers)}))


main()
