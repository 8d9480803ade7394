"""A worker for tests/e2e/torch_e2e_test.cc: muster.torch's default group,
one allreduce, and what the worker sees.

Prints "rank R of W: allreduce S store MusterStore recovery B", where S is
1 + 2 + ... + W when the allreduce is right. With --fail-once-rank=R, rank R
of the job's first attempt exits 3 after the allreduce (a worker failure the
agent restarts). With --plain, no muster.torch: torch's own env:// init (a
TCPStore on MASTER_ADDR:MASTER_PORT) and a sleep of --sleep seconds, for the
"scripts without muster.torch are restarted" case.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fail-once-rank", type=int, default=-1)
    p.add_argument("--plain", action="store_true")
    p.add_argument("--sleep", type=float, default=0)
    args = p.parse_args()
    if args.plain:
        dist.init_process_group("gloo")
        store = "TCPStore"
        recovery = False
    else:
        import muster.torch
        muster.torch.init_process_group("gloo")
        store = type(muster.torch.store()).__name__
        recovery = muster.torch.recovery_enabled()
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: allreduce "
          f"{t.item():.0f} store {store} recovery {recovery} pid "
          f"{os.getpid()}", flush=True)
    if (dist.get_rank() == args.fail_once_rank and
            os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"):
        sys.exit(3)
    if args.sleep > 0:
        time.sleep(args.sleep)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
