"""DDP training that survives a lost node and grows back, in place.

    muster --nnodes=2:3 --nproc-per-node=1 --rdzv-endpoint=HOST:29400 \\
        --rdzv-id=job --recovery=in-place examples/ddp_inplace.py --steps=400

A tiny model on CPU with the gloo backend, over muster.torch: the process
group lives on musterd's Store (no TCPStore), and when a node is lost or one
joins, the processes that survive go on in the next round instead of being
started again:

  * between steps, ``muster.torch.round_changed()`` says that the agent
    announced a new round (a newcomer waits, or a node was lost);
  * a collective that fails (gloo raises RuntimeError when a peer is gone)
    means the same;
  * either way ``muster.torch.recover()`` joins the next round, DDP is made
    again on the new group, and rank 0 broadcasts the step and the
    parameters, which is how a newcomer gets them.

Prints ``start: rank R of W pid P`` when a process starts, ``recovered: rank
R of W at step S in N ms`` after each recovery, each rank's ``checksum`` of
its parameters at the end, and on rank 0 ``all W ranks agree`` when every
rank holds the same parameters. Under --recovery=restart it runs as a plain
DDP script (a failure ends it and the agent restarts every worker).
"""

import time

_STARTED = time.time()  # before torch is imported (--timing)

import argparse
import hashlib
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import muster.torch


def process_started():
    """When this process started (wall clock), on Linux: before the
    interpreter and whatever ran before this file (--run-path's bootstrap
    imports torch first); else when this file started."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return _STARTED


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=200, help="steps to train")
    p.add_argument("--step-ms", type=float, default=0.0,
                   help="sleep this long per step (so that a job lasts long "
                   "enough to be interrupted)")
    p.add_argument("--batch", type=int, default=8, help="samples per rank")
    p.add_argument("--timing", action="store_true",
                   help="print what starting cost (importing torch, the "
                   "group, DDP) and the wall-clock time of the first step "
                   "after each start or recovery (bench/torch_recovery.py)")
    return p.parse_args()


class Trainer:
    def __init__(self, args):
        self.args = args
        self.first_step_pending = True
        torch.manual_seed(0)  # the same start everywhere; rank 0 wins anyway
        self.model = torch.nn.Sequential(torch.nn.Linear(16, 32),
                                         torch.nn.Tanh(),
                                         torch.nn.Linear(32, 1))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.step = 0
        self.ddp = None

    def start_round(self):
        """At the start of every round: rank 0's step and parameters to
        everyone (newcomers included), and DDP on the round's group."""
        step = torch.tensor([self.step], dtype=torch.int64)
        dist.broadcast(step, 0)
        self.step = int(step.item())
        with torch.no_grad():
            for p in self.model.parameters():
                dist.broadcast(p.data, 0)
        # DDP holds the group it was made on: a new one per round.
        self.ddp = DistributedDataParallel(self.model)
        # Its gradient all-reduces, timed for musterd's straggler scores
        # (docs/stragglers.md).
        muster.torch.watch_speed(self.ddp)

    def train_step(self):
        # Each rank's batch depends on the step and the rank only, so a
        # step repeated after a recovery computes the same thing.
        g = torch.Generator().manual_seed(self.step * 1000 + dist.get_rank())
        x = torch.randn(self.args.batch, 16, generator=g)
        y = x.sum(dim=1, keepdim=True).sin()
        loss = torch.nn.functional.mse_loss(self.ddp(x), y)
        self.opt.zero_grad()
        loss.backward()  # DDP's allreduce of the gradients
        self.opt.step()
        self.step += 1
        return loss.item()

    def recover(self, why):
        """Joins the next round; again when that one fails while starting."""
        began = time.monotonic()
        while True:
            rank, world = muster.torch.recover()
            try:
                self.start_round()
                break
            except RuntimeError as e:
                if isinstance(e, muster.torch.RecoveryError):
                    raise
                why = str(e)  # another loss while starting: the next round
        ms = (time.monotonic() - began) * 1000
        print(f"recovered: rank {rank} of {world} at step {self.step} in "
              f"{ms:.0f} ms ({why.splitlines()[0][:120]})", flush=True)
        self.first_step_pending = True

    def checksum(self):
        h = hashlib.sha256()
        for p in self.model.parameters():
            h.update(p.detach().numpy().tobytes())
        return h.hexdigest()[:16]

    def agree(self):
        """Whether every rank holds rank 0's parameters."""
        flat = torch.cat([p.detach().flatten() for p in self.model.parameters()])
        mine = flat.clone()
        dist.broadcast(flat, 0)
        same = torch.tensor([1 if torch.equal(flat, mine) else 0])
        dist.all_reduce(same, op=dist.ReduceOp.MIN)
        return bool(same.item())


def main():
    args = parse_args()
    imported = time.time()
    muster.torch.init_process_group(backend="gloo")
    formed = time.time()
    in_place = muster.torch.recovery_enabled()
    print(f"start: rank {dist.get_rank()} of {dist.get_world_size()} pid "
          f"{os.getpid()}", flush=True)
    t = Trainer(args)
    failure = None
    while True:
        try:
            if failure is not None:
                t.recover(failure)
                failure = None
            elif t.ddp is None:
                t.start_round()
                if args.timing:
                    print(f"timing: start and import "
                          f"{1000 * (imported - process_started()):.0f} ms, "
                          f"group {1000 * (formed - imported):.0f} ms, "
                          f"state and DDP {1000 * (time.time() - formed):.0f}"
                          " ms", flush=True)
            if muster.torch.round_changed():
                failure = "the round changed"
                continue
            if t.step >= args.steps:
                agreed = t.agree()
                break
            loss = t.train_step()
            if args.timing and t.first_step_pending:
                t.first_step_pending = False
                print(f"first step: rank {dist.get_rank()} step {t.step} at "
                      f"{time.time():.3f}", flush=True)
            if t.step % 50 == 0 and dist.get_rank() == 0:
                print(f"step {t.step}: loss {loss:.4f} on "
                      f"{dist.get_world_size()} ranks", flush=True)
            if args.step_ms > 0:
                time.sleep(args.step_ms / 1000)
        except muster.torch.RecoveryError:
            raise
        except RuntimeError as e:
            if not in_place:
                raise  # --recovery=restart: the agent starts everyone again
            failure = str(e)  # a peer is gone: recover at the loop's top
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}: step {t.step}, checksum {t.checksum()}", flush=True)
    if rank == 0:
        print(f"all {world} ranks agree" if agreed else
              f"ranks disagree on the parameters (world {world})", flush=True)
    dist.destroy_process_group()
    return 0 if agreed else 1


if __name__ == "__main__":
    sys.exit(main())
