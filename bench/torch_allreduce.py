#!/usr/bin/env python3
"""torch.distributed's gloo allreduce, measured and printed as muster-bench does.

Run it under muster (or torchrun) so that RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT are set:

  PYTHON_EXEC=/usr/bin/python3 build/bin/muster --standalone --nproc-per-node=2 \\
      bench/torch_allreduce.py [--min=8] [--max=256M] [--seconds=0.5] [--csv=F]

Same method as muster-bench: float32 sum, in place on zeros, sizes from --min
to --max by --factor; per size one warm-up, then --batches timed batches of
about --seconds/--batches each; the reported time is the best batch's mean,
taken on the slowest rank; algbw = bytes / time, busbw = algbw * 2(n-1)/n.
--csv appends "torch:gloo,allreduce,ranks,bytes,count,time_us,algbw,busbw".
"""
import argparse
import sys
import time

import torch
import torch.distributed as dist


def parse_size(text):
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    if mult != 1:
        text = text[:-1]
    return int(text) * mult


def slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min", default="8")
    parser.add_argument("--max", default="256M")
    parser.add_argument("--factor", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=0.2)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--csv", default="")
    args = parser.parse_args()

    dist.init_process_group("gloo")  # env://: the launcher's variables
    rank = dist.get_rank()
    n = dist.get_world_size()
    lo, hi = parse_size(args.min), parse_size(args.max)
    buf = torch.zeros(max(hi // 4, 1), dtype=torch.float32)
    lines = []
    size = lo
    while size <= hi:
        count = max(size // 4, 1)
        t = buf[:count]
        dist.all_reduce(t)
        t0 = time.perf_counter()
        dist.all_reduce(t)
        warm = slowest(time.perf_counter() - t0)
        per_batch = args.seconds / args.batches
        iters = int(min(max(per_batch / max(warm, 1e-7), 1), 20000))
        best = float("inf")
        for _ in range(args.batches):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t)
            best = min(best, slowest((time.perf_counter() - t0) / iters))
        nbytes = count * 4
        algbw = nbytes / best / 1e9
        busbw = algbw * 2 * (n - 1) / n
        lines.append(" %12d %12d %8s %6s %12.2f %10.3f %10.3f"
                     % (nbytes, count, "float32", "sum", best * 1e6, algbw,
                        busbw))
        if rank == 0 and args.csv:
            with open(args.csv, "a") as f:
                f.write("torch:gloo,allreduce,%d,%d,%d,%.3f,%.4f,%.4f\n"
                        % (n, nbytes, count, best * 1e6, algbw, busbw))
        size *= args.factor
    if rank == 0:
        print("# torch %s gloo allreduce, %d ranks (best of %d batches)"
              % (torch.__version__, n, args.batches))
        print("#%12s %12s %8s %6s %12s %10s %10s"
              % ("size(B)", "count", "type", "redop", "time(us)",
                 "algbw(GB/s)", "busbw(GB/s)"))
        print("\n".join(lines))
        sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
