#!/usr/bin/python3
"""torch's TCPStore under the load bench/store.sh puts on musterd's Store.

    /usr/bin/python3 bench/tcpstore_bench.py server            # prints the port, serves until stdin closes
    /usr/bin/python3 bench/tcpstore_bench.py clients PORT --clients=1000 --op=set [--seconds=5]

Each client is its own TCPStore connection issuing one operation at a time (the C++ client
releases the GIL while it waits), spread over --procs processes of threads. set: own keys;
get: a key set beforehand; add: one shared counter. Prints the same line as muster-store-bench.
Debian's torch 1.13 (python3-torch) is the TCPStore measured; run it with /usr/bin/python3.
"""
import argparse
import datetime
import multiprocessing as mp
import sys
import threading
import time


def serve():
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=600),
                          wait_for_workers=False)
    print(store.port, flush=True)
    sys.stdin.read()  # until the caller closes our stdin


def worker(port, first, count, op, seconds, value, ready, go, start, out):
    import torch.distributed as dist
    stores = [dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=60),
                            wait_for_workers=False) for _ in range(count)]
    if op == "get":
        for i, s in enumerate(stores):
            s.set(f"g{first + i}", value)
    ready.put(count)
    go.wait()  # every process has connected its clients
    start_at = start.value
    stop_at = start_at + seconds
    results = []

    def run(i, s):
        n, lat, errors = 0, [], 0
        key = f"k{first + i}"
        while time.time() < start_at - 0.5:  # warm-up starts 0.5 s early
            time.sleep(0.01)
        j = 0
        while True:
            t = time.time()
            if t >= stop_at:
                break
            try:
                if op == "set":
                    s.set(f"{key}-{j % 1000}", value)
                elif op == "get":
                    s.get(f"g{first + i}")
                else:
                    s.add("counter", 1)
            except Exception:  # noqa: BLE001 - counted, reported
                errors += 1
            j += 1
            if t >= start_at:
                n += 1
                if len(lat) < 10000:
                    lat.append((time.time() - t) * 1e6)
        results.append((n, lat, errors))

    threads = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(results)


def clients(args):
    per = [args.clients // args.procs + (1 if i < args.clients % args.procs else 0)
           for i in range(args.procs)]
    ctx = mp.get_context("fork")
    out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    start = ctx.Value("d", 0.0)
    procs, first = [], 0
    for count in per:
        p = ctx.Process(target=worker, args=(args.port, first, count, args.op, args.seconds,
                                             "v" * args.value_bytes, ready, go, start, out))
        p.start()
        procs.append(p)
        first += count
    # Importing torch and connecting 1,000 clients takes a while: the clock starts once every
    # process is ready (after a 0.5 s warm-up).
    for _ in procs:
        ready.get(timeout=300)
    start.value = time.time() + 0.5
    go.set()
    ops, lat, errors = 0, [], 0
    for _ in procs:
        for n, l, e in out.get(timeout=args.seconds + 300):
            ops += n
            lat += l
            errors += e
    for p in procs:
        p.join()
    lat.sort()
    pct = lambda q: lat[int(q * (len(lat) - 1))] if lat else -1  # noqa: E731
    print(f"op={args.op} clients={args.clients} ops={ops} seconds={args.seconds:.2f} "
          f"ops_per_s={ops / args.seconds:.0f} p50_us={pct(0.5):.0f} p99_us={pct(0.99):.0f} "
          f"errors={errors}")
    return 0 if errors == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["server", "clients"])
    ap.add_argument("port", nargs="?", type=int)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--op", choices=["set", "get", "add"], default="set")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--value-bytes", type=int, default=64)
    args = ap.parse_args()
    if args.mode == "server":
        serve()
        return 0
    if args.port is None:
        ap.error("clients needs the server's PORT")
    return clients(args)


if __name__ == "__main__":
    sys.exit(main())
