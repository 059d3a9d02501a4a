"""Calls a Service the way users' clients do, from a pod: tritonclient over REST and gRPC.

Run inside the client image (it is passed to `python3 -` on standard input):

    calls.py CHECK HOST [options]

CHECK is one of binary, classification, sequence, spread, rolling, shm, large, metrics, served,
variants, sequences. The last line printed is a
JSON object with what the server answered; the test compares it with what it expects. Any error
of the client (a refused call, a wrong status) ends the script with a non-zero status.
"""

import argparse
import json
import os
import sys
import urllib.error
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient


def clients(host):
    return (httpclient.InferenceServerClient(f"{host}:8000", network_timeout=60.0),
            grpcclient.InferenceServerClient(f"{host}:8001"))


def simple_inputs(module, binary):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"),
              module.InferInput("INPUT1", [1, 16], "INT32")]
    if module is httpclient:
        inputs[0].set_data_from_numpy(a, binary_data=binary)
        inputs[1].set_data_from_numpy(b, binary_data=binary)
    else:
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
    return inputs


def check_binary(args):
    """Binary tensor data both ways over REST, and gRPC: `simple` (two INT32 inputs) or an FP32
    identity model."""
    http, grpc = clients(args.host)
    out = {}
    if args.model == "simple":
        names = ("OUTPUT0", "OUTPUT1")
        rest_inputs, grpc_inputs = simple_inputs(httpclient, True), simple_inputs(grpcclient, True)
    else:
        names = ("OUTPUT0",)
        n = args.elements
        x = (np.arange(n, dtype=np.float32) - 4.5).reshape(1, n)
        rest_inputs = [httpclient.InferInput("INPUT0", [1, n], "FP32")]
        rest_inputs[0].set_data_from_numpy(x, binary_data=True)
        grpc_inputs = [grpcclient.InferInput("INPUT0", [1, n], "FP32")]
        grpc_inputs[0].set_data_from_numpy(x)
        out["input"] = x.tolist()
    outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in names]
    r = http.infer(args.model, rest_inputs, outputs=outputs)
    out["rest"] = {n: r.as_numpy(n).tolist() for n in names}
    out["rest_binary_outputs"] = all(o.get("parameters", {}).get("binary_data_size")
                                     for o in r.get_response()["outputs"])
    r = grpc.infer(args.model, grpc_inputs)
    out["grpc"] = {n: r.as_numpy(n).tolist() for n in names}
    return out


def check_classification(args):
    http, grpc = clients(args.host)
    x = np.array([[0.5, 3.3, -1.0, 2.25, 0.0, 1.5, -2.0, 0.25, 9.0, 4.0, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7]],
                 dtype=np.float32)[:, : args.elements]
    hi = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
    hi.set_data_from_numpy(x, binary_data=True)
    r = http.infer(args.model, [hi], outputs=[httpclient.InferRequestedOutput(
        "OUTPUT0", binary_data=False, class_count=args.classes)])
    rest = [v.decode() if isinstance(v, bytes) else v for v in r.as_numpy("OUTPUT0").reshape(-1)]
    gi = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
    gi.set_data_from_numpy(x)
    r = grpc.infer(args.model, [gi], outputs=[grpcclient.InferRequestedOutput(
        "OUTPUT0", class_count=args.classes)])
    grpc_answer = [v.decode() for v in r.as_numpy("OUTPUT0").reshape(-1)]
    return {"input": x.reshape(-1).tolist(), "rest": rest, "grpc": grpc_answer}


def check_sequence(args):
    """A whole sequence (one INT32 INPUT per request) over REST, unary gRPC and a gRPC stream,
    each with a sequence id of its own; the answers are returned in order."""
    http, grpc = clients(args.host)
    values = [3, 5, 7, 11]
    out = {"values": values}

    def request(module, v):
        i = module.InferInput("INPUT", [1, 1], "INT32")
        i.set_data_from_numpy(np.array([[v]], dtype=np.int32))
        return [i]

    answers = []
    for n, v in enumerate(values):
        r = http.infer(args.model, request(httpclient, v), sequence_id=args.sequence_id,
                       sequence_start=n == 0, sequence_end=n == len(values) - 1)
        answers.append(r.as_numpy("OUTPUT").reshape(-1).tolist())
    out["rest"] = answers
    answers = []
    for n, v in enumerate(values):
        r = grpc.infer(args.model, request(grpcclient, v), sequence_id=args.sequence_id + 1,
                       sequence_start=n == 0, sequence_end=n == len(values) - 1)
        answers.append(r.as_numpy("OUTPUT").reshape(-1).tolist())
    out["grpc"] = answers

    import queue
    results = queue.Queue()
    grpc.start_stream(callback=lambda result, error: results.put((result, error)))
    for n, v in enumerate(values):
        grpc.async_stream_infer(args.model, request(grpcclient, v), sequence_id=args.sequence_id + 2,
                                sequence_start=n == 0, sequence_end=n == len(values) - 1)
    answers = []
    for _ in values:
        result, error = results.get(timeout=60)
        if error is not None:
            raise RuntimeError(f"stream: {error}")
        answers.append(result.as_numpy("OUTPUT").reshape(-1).tolist())
    grpc.stop_stream()
    out["stream"] = answers
    return out


def check_spread(args):
    """Sequences whose requests go round-robin over every pod (HOST: the pods' addresses, comma
    separated), interleaved: request n of sequence s goes to pod (s + n) % pods, over REST,
    unary gRPC, and gRPC streams (one stream per pod). The answers are returned per sequence."""
    hosts = args.host.split(",")
    pods = [clients(h) for h in hosts]
    values = [[s * 10 + n + 1 for n in range(args.length)] for s in range(args.sequences)]

    def request(module, v):
        i = module.InferInput("INPUT", [1, 1], "INT32")
        i.set_data_from_numpy(np.array([[v]], dtype=np.int32))
        return [i]

    import queue
    streams = []
    for _, grpc in pods:
        results = queue.Queue()
        grpc.start_stream(callback=lambda result, error, q=results: q.put((result, error)))
        streams.append(results)

    out = {"values": values, "pods": len(hosts)}
    try:
        for proto, base in (("rest", 0), ("grpc", 1), ("stream", 2)):
            answers = [[] for _ in values]
            for n in range(args.length):
                for s, seq in enumerate(values):
                    pod = (s + n) % len(hosts)
                    http, grpc = pods[pod]
                    flags = dict(sequence_id=args.sequence_id + 10 * s + base,
                                 sequence_start=n == 0, sequence_end=n == args.length - 1)
                    if proto == "rest":
                        r = http.infer(args.model, request(httpclient, seq[n]), **flags)
                    elif proto == "grpc":
                        r = grpc.infer(args.model, request(grpcclient, seq[n]), **flags)
                    else:
                        grpc.async_stream_infer(args.model, request(grpcclient, seq[n]), **flags)
                        r, error = streams[pod].get(timeout=60)
                        if error is not None:
                            raise RuntimeError(f"stream to {hosts[pod]}: {error}")
                    answers[s].append(int(r.as_numpy("OUTPUT").reshape(-1)[0]))
            out[proto] = answers
    finally:
        for _, grpc in pods:
            grpc.stop_stream()
    return out


def check_rolling(args):
    """Sequences kept going while the pods change. Each round sends one request of every
    sequence, request n of sequence s to pod (s + n) % pods of the addresses in --hosts-file (read
    again every round), over REST on even rounds and unary gRPC on odd ones (the rounds done so
    far in --stop-file plus ".rounds"), a fraction of a second apart (well inside the models' idle timeout). Once --stop-file exists, --length more
    rounds, the last with END. The sequences are --sequence-ids, or --sequences from
    --sequence-id on. Returns, per sequence, the values sent, the answers and the pod of each
    request."""
    import os
    import time

    def request(module, v):
        i = module.InferInput("INPUT", [1, 1], "INT32")
        i.set_data_from_numpy(np.array([[v]], dtype=np.int32))
        return [i]

    ids = ([int(i) for i in args.sequence_ids.split(",")] if args.sequence_ids
           else [args.sequence_id + s for s in range(args.sequences)])
    connections = {}
    sent = [[] for _ in ids]
    answers = [[] for _ in ids]
    pods = [[] for _ in ids]
    n, left, hosts = 0, None, []
    while left is None or left > 0:
        if left is None and os.path.exists(args.stop_file):
            left = args.length
        with open(args.hosts_file) as f:
            # The test replaces the file by a rename; an empty read keeps the last list.
            hosts = f.read().split() or hosts
        last = left == 1
        for s, sequence_id in enumerate(ids):
            host = hosts[(s + n) % len(hosts)]
            if host not in connections:
                connections[host] = clients(host)
            http, grpc = connections[host]
            value = s * 10 + n % 10 + 1
            flags = dict(sequence_id=sequence_id, sequence_start=n == 0, sequence_end=last)
            if n % 2 == 0:
                r = http.infer(args.model, request(httpclient, value), **flags)
            else:
                r = grpc.infer(args.model, request(grpcclient, value), **flags)
            sent[s].append(value)
            answers[s].append(int(r.as_numpy("OUTPUT").reshape(-1)[0]))
            pods[s].append(host)
        n += 1
        if left is not None:
            left -= 1
        with open(args.stop_file + ".rounds", "w") as f:
            f.write(str(n))
        time.sleep(0.2)
    return {"values": sent, "answers": answers, "pods": pods}


def check_shm(args):
    """`simple` with inputs and outputs in system shared memory, registered over REST and gRPC;
    the regions are in the pod's /dev/shm, which this container shares with the sidecar."""
    import tritonclient.utils.shared_memory as shm
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    size = a.nbytes
    out = {}
    for proto in ("rest", "grpc"):
        module = httpclient if proto == "rest" else grpcclient
        client = (httpclient.InferenceServerClient(f"{args.host}:8000") if proto == "rest"
                  else grpcclient.InferenceServerClient(f"{args.host}:8001"))
        key = f"/e2e_{proto}"
        ih = shm.create_shared_memory_region(f"in_{proto}", key + "_in", size * 2)
        oh = shm.create_shared_memory_region(f"out_{proto}", key + "_out", size * 2)
        try:
            shm.set_shared_memory_region(ih, [a, b])
            # By name: with no name Triton's API unregisters every region of the server, and the
            # pod's other client (triton-shm.yaml's perf_analyzer loop) has its own registered.
            for name in (f"in_{proto}", f"out_{proto}"):
                client.unregister_system_shared_memory(name)
            client.register_system_shared_memory(f"in_{proto}", key + "_in", size * 2)
            client.register_system_shared_memory(f"out_{proto}", key + "_out", size * 2)
            inputs = [module.InferInput("INPUT0", [1, 16], "INT32"),
                      module.InferInput("INPUT1", [1, 16], "INT32")]
            inputs[0].set_shared_memory(f"in_{proto}", size)
            inputs[1].set_shared_memory(f"in_{proto}", size, offset=size)
            outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
            outputs[0].set_shared_memory(f"out_{proto}", size)
            outputs[1].set_shared_memory(f"out_{proto}", size, offset=size)
            client.infer(args.model, inputs, outputs=outputs)
            got0 = shm.get_contents_as_numpy(oh, np.int32, [1, 16])
            got1 = shm.get_contents_as_numpy(oh, np.int32, [1, 16], offset=size)
            status = client.get_system_shared_memory_status()
            # Only this client's: the pod's other client (triton-shm.yaml's perf_analyzer loop)
            # registers regions of its own with the same sidecar now and then.
            names = ([r["name"] for r in status] if isinstance(status, list)
                     else list(status.regions))
            out[proto] = {"OUTPUT0": got0.tolist(), "OUTPUT1": got1.tolist(),
                          "registered": len({f"in_{proto}", f"out_{proto}"} & set(names))}
            for name in (f"in_{proto}", f"out_{proto}"):
                client.unregister_system_shared_memory(name)
        finally:
            shm.destroy_shared_memory_region(ih)
            shm.destroy_shared_memory_region(oh)
    return out


def check_large(args):
    """identity_fp32 with a million elements, binary over REST and over gRPC; answers compared
    here, element by element."""
    http, grpc = clients(args.host)
    # identity_fp32 takes one dimension of any length (no batching).
    x = np.arange(args.elements, dtype=np.float32) * 0.5 - 7.0
    hi = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
    hi.set_data_from_numpy(x, binary_data=True)
    r = http.infer(args.model, [hi], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)])
    rest_ok = bool(np.array_equal(r.as_numpy("OUTPUT0"), x))
    gi = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
    gi.set_data_from_numpy(x)
    r = grpc.infer(args.model, [gi])
    grpc_ok = bool(np.array_equal(r.as_numpy("OUTPUT0"), x))
    return {"elements": args.elements, "rest_equal": rest_ok, "grpc_equal": grpc_ok,
            "bytes": int(x.nbytes)}


def check_metrics(args):
    """The sidecar's Prometheus metrics at HOST:PORT (a pod's address: not in the Service)."""
    with urllib.request.urlopen(f"http://{args.host}:{args.port}/metrics", timeout=10) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("infergate_staging") and " " in line:
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def check_served(args):
    """How many requests for MODEL each pod (HOST: the pods' addresses, comma separated) has
    answered, from its sidecar's statistics: which pods a client's calls reached."""
    counts = {}
    for host in args.host.split(","):
        url = f"http://{host}:8000/v2/models/{args.model}/stats"
        with urllib.request.urlopen(url, timeout=10) as r:
            stats = json.loads(r.read())["model_stats"]
        counts[host] = sum(m["inference_stats"]["success"]["count"] for m in stats)
    return counts


def check_variants(args):
    """--calls classification calls of the classifier (class_count 1) on one client of each
    protocol (one gRPC channel; one HTTP connection): each answer's value and index must be the
    input's largest, and its label tells which variant answered (the canary's label file is the
    service's in upper case). Returns, per protocol, how many answers had each kind of label."""
    rng = np.random.default_rng(11)
    out = {}
    for proto, module in (("grpc", grpcclient), ("rest", httpclient)):
        client = (module.InferenceServerClient(f"{args.host}:8001") if module is grpcclient
                  else module.InferenceServerClient(f"{args.host}:8000", network_timeout=60.0))
        counts = {"upper": 0, "lower": 0}
        for _ in range(args.calls):
            x = rng.permutation(np.array([0.5, 3.25, -1.0, 2.0], dtype=np.float32)).reshape(1, 4)
            i = module.InferInput("INPUT0", [1, 4], "FP32")
            i.set_data_from_numpy(x)
            kwargs = {"binary_data": False} if module is httpclient else {}
            wanted = [module.InferRequestedOutput("OUTPUT0", class_count=1, **kwargs)]
            r = client.infer("classifier", [i], outputs=wanted)
            answer = r.as_numpy("OUTPUT0").reshape(-1)[0]
            answer = answer.decode() if isinstance(answer, bytes) else answer
            value, index, label = answer.split(":")
            top = int(np.argmax(x))
            if int(index) != top or float(value) != float(x[0, top]):
                raise AssertionError(f"{proto}: {answer} for {x.tolist()}")
            counts["upper" if label.isupper() else "lower"] += 1
        client.close()
        out[proto] = counts
    return out


def check_sequences(args):
    """--sequences sequences of sequence_accumulator (--length requests each, running sums) on
    one gRPC channel, four at a time interleaved, ids from --sequence-id up. Returns each
    sequence's answers by id."""
    client = grpcclient.InferenceServerClient(f"{args.host}:8001")
    ids = [args.sequence_id + n for n in range(args.sequences)]
    answers = {sid: [] for sid in ids}
    for group in range(0, len(ids), 4):
        for step in range(args.length):
            for sid in ids[group:group + 4]:
                i = grpcclient.InferInput("INPUT", [1, 1], "INT32")
                i.set_data_from_numpy(np.array([[sid % 7 + step]], dtype=np.int32))
                r = client.infer("sequence_accumulator", [i], sequence_id=sid,
                                 sequence_start=step == 0, sequence_end=step == args.length - 1)
                answers[sid].append(int(r.as_numpy("OUTPUT").reshape(-1)[0]))
    client.close()
    return {str(sid): a for sid, a in answers.items()}


# Four values: `classifier` (an FP32 identity with labels) takes [batch, 4].
IDENTITY_INPUT = [-1.5, 0.5, 2.25, 3.0]


def rest_body(model):
    """`simple` (two INT32 inputs), or an FP32 identity model (`classifier`, `identity_fp32`)."""
    if model == "simple":
        return json.dumps({"inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}]}).encode()
    return json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, len(IDENTITY_INPUT)],
                                   "datatype": "FP32", "data": IDENTITY_INPUT}]}).encode()


def check_rest_answer(model, body):
    outputs = {o["name"]: o["data"] for o in json.loads(body)["outputs"]}
    if model == "simple":
        right = (outputs["OUTPUT0"] == [n + 1 for n in range(16)]
                 and outputs["OUTPUT1"] == [n - 1 for n in range(16)])
    else:
        right = outputs["OUTPUT0"] == IDENTITY_INPUT
    if not right:
        raise AssertionError(f"wrong answer: {body}")


def grpc_inputs(model):
    if model == "simple":
        return simple_inputs(grpcclient, False)
    i = grpcclient.InferInput("INPUT0", [1, len(IDENTITY_INPUT)], "FP32")
    i.set_data_from_numpy(np.array([IDENTITY_INPUT], dtype=np.float32))
    return [i]


def check_grpc_answer(model, result):
    if model == "simple":
        right = result.as_numpy("OUTPUT0").reshape(-1).tolist() == [n + 3 for n in range(16)]
    else:
        right = result.as_numpy("OUTPUT0").reshape(-1).tolist() == IDENTITY_INPUT
    if not right:
        raise AssertionError("gRPC: wrong answer")


def rest_call(host, model, timeout):
    """One REST call with urllib (to see every status and header): (status, headers, body); the
    answer checked where it is 200."""
    request = urllib.request.Request(f"http://{host}:8000/v2/models/{model}/infer",
                                     data=rest_body(model),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            status, headers, body = r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        status, headers, body = e.code, dict(e.headers), e.read().decode()
    if status == 200:
        check_rest_answer(model, body)
    return status, {k.lower(): v for k, v in headers.items()}, body


def check_from_zero(args):
    """What a service scaled to zero is asked first, all at once: a REST call and a gRPC call of
    --model, a whole sequence on a gRPC stream and one in unary gRPC calls (sequence_accumulator,
    ids from --sequence-id). Every answer exact; each one's seconds to its (first) answer."""
    import threading
    import time
    values = [3, 5, 7, 11]
    sums = [sum(values[:n + 1]) for n in range(len(values))]
    out, errors = {}, []
    started = time.monotonic()

    def seq_input(module, v):
        i = module.InferInput("INPUT", [1, 1], "INT32")
        i.set_data_from_numpy(np.array([[v]], dtype=np.int32))
        return [i]

    def rest():
        status, _, body = rest_call(args.host, args.model, 600)
        if status != 200:
            raise AssertionError(f"REST {status}: {body}")
        out["rest_s"] = time.monotonic() - started

    def grpc_unary():
        client = grpcclient.InferenceServerClient(f"{args.host}:8001")
        r = client.infer(args.model, grpc_inputs(args.model), client_timeout=600)
        check_grpc_answer(args.model, r)
        out["grpc_s"] = time.monotonic() - started
        client.close()

    def stream():
        import queue
        client = grpcclient.InferenceServerClient(f"{args.host}:8001")
        results = queue.Queue()
        client.start_stream(callback=lambda result, error: results.put((result, error)),
                            stream_timeout=600)
        sid = args.sequence_id
        for n, v in enumerate(values):
            client.async_stream_infer("sequence_accumulator", seq_input(grpcclient, v),
                                      sequence_id=sid, sequence_start=n == 0,
                                      sequence_end=n == len(values) - 1)
        got = []
        for _ in values:
            result, error = results.get(timeout=600)
            if error is not None:
                raise RuntimeError(f"stream: {error}")
            if not got:
                out["stream_s"] = time.monotonic() - started
            got.append(int(result.as_numpy("OUTPUT").reshape(-1)[0]))
        client.stop_stream()
        client.close()
        if got != sums:
            raise AssertionError(f"stream sequence: {got} != {sums}")

    def sequence():
        client = grpcclient.InferenceServerClient(f"{args.host}:8001")
        got = []
        for n, v in enumerate(values):
            r = client.infer("sequence_accumulator", seq_input(grpcclient, v),
                             sequence_id=args.sequence_id + 1, sequence_start=n == 0,
                             sequence_end=n == len(values) - 1, client_timeout=600)
            if not got:
                out["sequence_s"] = time.monotonic() - started
            got.append(int(r.as_numpy("OUTPUT").reshape(-1)[0]))
        client.close()
        if got != sums:
            raise AssertionError(f"unary sequence: {got} != {sums}")

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(f"{fn.__name__}: {e!r}")
        return run

    threads = [threading.Thread(target=guarded(f)) for f in (rest, grpc_unary, stream, sequence)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise AssertionError("; ".join(errors))
    return {k: round(v, 2) for k, v in out.items()}


def check_burst(args):
    """--calls REST calls of --model at once: how many were answered (exactly), how many refused
    with 503, and the refusals' Retry-After and messages."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(args.calls) as pool:
        answers = list(pool.map(lambda _: rest_call(args.host, args.model, 600), range(args.calls)))
    refused = [(h.get("retry-after"), json.loads(b).get("error", "")) for s, h, b in answers
               if s == 503]
    others = [s for s, _, _ in answers if s not in (200, 503)]
    if others:
        raise AssertionError(f"statuses other than 200 and 503: {others}")
    return {"ok": sum(1 for s, _, _ in answers if s == 200), "refused": len(refused),
            "retry_after": sorted({r for r, _ in refused if r}),
            "messages": sorted({m for _, m in refused})}


def check_refused(args):
    """One REST call and one gRPC call of --model that are expected to be refused: their status
    and message."""
    status, headers, body = rest_call(args.host, args.model, 600)
    client = grpcclient.InferenceServerClient(f"{args.host}:8001")
    code, details = "OK", ""
    try:
        client.infer(args.model, grpc_inputs(args.model), client_timeout=600)
    except Exception as e:  # noqa: BLE001 - tritonclient's InferenceServerException
        code, details = str(getattr(e, "status", lambda: "")()), str(getattr(e, "message", lambda: e)())
    client.close()
    return {"rest": {"status": status, "body": body}, "grpc": {"code": code, "details": details}}


def check_connect(args):
    """Whether a TCP connection to HOST:--port opens within 3 s (no call is sent)."""
    import socket
    try:
        socket.create_connection((args.host, args.port), timeout=3).close()
        return {"open": True}
    except OSError as e:
        return {"open": False, "error": str(e)}


def check_hold_stream(args):
    """A ModelStreamInfer stream kept open --seconds with a call of --model at its start and one
    half way: the service must not scale to zero under it."""
    import queue
    import time
    client = grpcclient.InferenceServerClient(f"{args.host}:8001")
    results = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)),
                        stream_timeout=args.seconds + 120)
    for _ in range(2):
        client.async_stream_infer(args.model, grpc_inputs(args.model))
        result, error = results.get(timeout=120)
        if error is not None:
            raise RuntimeError(f"stream: {error}")
        time.sleep(args.seconds / 2)
    client.stop_stream()
    client.close()
    return {"held_s": args.seconds}


CHECKS = {"binary": check_binary, "from_zero": check_from_zero, "burst": check_burst,
          "refused": check_refused, "hold_stream": check_hold_stream, "connect": check_connect, "variants": check_variants, "sequences": check_sequences, "classification": check_classification,
          "sequence": check_sequence, "spread": check_spread, "rolling": check_rolling,
          "shm": check_shm,
          "large": check_large,
          "metrics": check_metrics,
          "served": check_served}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("check", choices=sorted(CHECKS))
    p.add_argument("host")
    p.add_argument("--model", default="simple")
    p.add_argument("--classes", type=int, default=2)
    p.add_argument("--elements", type=int, default=16)
    p.add_argument("--sequence-id", type=int, default=1000)
    p.add_argument("--sequences", type=int, default=6)
    p.add_argument("--sequence-ids", default="", help="comma-separated (rolling)")
    p.add_argument("--length", type=int, default=6)
    p.add_argument("--hosts-file", default="/tmp/hosts")
    p.add_argument("--stop-file", default="/tmp/stop-rolling")
    p.add_argument("--port", type=int, default=8002)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--seconds", type=float, default=60)
    args = p.parse_args()
    try:
        print(json.dumps(CHECKS[args.check](args)), flush=True)
    except BaseException:
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        # A client's threads (gRPC streams) must not keep a failed check alive.
        os._exit(1)


if __name__ == "__main__":
    sys.exit(main())
