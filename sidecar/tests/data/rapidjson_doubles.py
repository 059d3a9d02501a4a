"""Writes rapidjson_doubles.txt: doubles (as hex bits) and the text Triton's JSON gives them.

Usage: python rapidjson_doubles.py http://127.0.0.1:8000 > rapidjson_doubles.txt
(any Triton serving an FP64 identity model `identity_fp64`; its JSON writer is rapidjson's).
sidecar/src/json/number.rs checks its writer against the file.
"""

import http.client
import json
import random
import struct
import sys
from urllib.parse import urlparse


def values():
    r = random.Random(20261126)
    out = [struct.unpack("<d", struct.pack("<Q", r.getrandbits(63)))[0] for _ in range(1000)]
    out += [struct.unpack("<f", struct.pack("<I", r.getrandbits(31)))[0] for _ in range(1000)]
    out += [r.uniform(-10, 10) for _ in range(500)]
    out += [struct.unpack("<f", struct.pack("<f", r.uniform(-10, 10)))[0] for _ in range(500)]
    out += [10.0 ** e for e in range(-30, 31)] + [1.2345 * 10.0 ** e for e in range(-30, 31)]
    out += [5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1 / 3, 0.1, 3.4028234663852886e38]
    return [v for v in out if v == v and abs(v) != float("inf") and v != 0.0]


def main():
    url = urlparse(sys.argv[1])
    vals = values()
    raw = struct.pack(f"<{len(vals)}d", *vals)
    header = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP64", "shape": [len(vals)],
                                     "parameters": {"binary_data_size": len(raw)}}]}).encode()
    conn = http.client.HTTPConnection(url.hostname, url.port)
    conn.request("POST", "/v2/models/identity_fp64/infer", header + raw,
                 {"Inference-Header-Content-Length": str(len(header))})
    body = conn.getresponse().read()
    texts = body.split(b'"data":[')[1].split(b"]")[0].decode().split(",")
    assert len(texts) == len(vals)
    print("# double bits | Triton's JSON text; made by rapidjson_doubles.py")
    for v, t in zip(vals, texts):
        print(f"{struct.unpack('<Q', struct.pack('<d', v))[0]:016x} | {t}")


if __name__ == "__main__":
    main()
