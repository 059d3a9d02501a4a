"""The owner of a sequence among sidecar peers, computed as docs/sequences.md describes it
(rendezvous hashing: FNV-1a 64 with SplitMix64's finalizer), independently of the sidecar's code.
The tests use it to know in advance which replica holds which sequence; the benchmark to pick
sequence ids that land on their owner or are forwarded. `percentile` is where a sequence falls in
0..100 for a canary's split (docs/sidecar.md, "Canary")."""


def _fnv(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def _key(model: str, seq_id) -> int:
    if isinstance(seq_id, str):
        tail = b"s" + seq_id.encode()
    else:
        tail = b"n" + (seq_id & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")
    return _fnv(model.encode() + b"\0" + tail)


def _score(key: int, name: bytes) -> int:
    return _mix(_fnv(key.to_bytes(8, "little") + name))


def percentile(model: str, seq_id) -> int:
    """Where sequence `seq_id` of `model` falls in 0..100: a canary given p percent takes the
    sequences below p."""
    return _score(_key(model, seq_id), b"canary split") % 100


def owner(peers: list[str], model: str, seq_id) -> int:
    """Index into `peers` (every listed peer ready) of the owner of sequence `seq_id` (an int or
    a str) of `model`."""
    key = _key(model, seq_id)
    scores = [_score(key, p.encode()) for p in peers]
    # Highest score first; a tie to the lower index.
    return max(range(len(peers)), key=lambda i: (scores[i], -i))
