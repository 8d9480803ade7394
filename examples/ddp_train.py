#!/usr/bin/env python3
"""The train.cc problem with PyTorch DDP on the gloo backend: a muster demo for Python workers.

    muster --standalone --nproc-per-node=4 /usr/bin/python3 examples/ddp_train.py [--epochs=50]

Rendezvous is torch's env:// (the launcher sets MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE).
Every rank builds the same synthetic linear-regression problem (fixed seed), trains on its shard
(samples rank, rank + world_size, ...) with one full-batch step per epoch while DDP averages the
gradients, then prints one summary line. The ranks all-gather their parameters and check that
they are equal bit for bit and that the loss fell. Exit status 0 on success, 1 otherwise.
"""

import argparse
import hashlib
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

SAMPLES = 4096
FEATURES = 16
SEED = 20240601
NOISE = 0.03


def make_problem():
    """y = X w_true + b_true + noise, the same on every rank."""
    gen = torch.Generator().manual_seed(SEED)
    w_true = torch.tensor([(1.0 if j % 2 == 0 else -1.0) * (j + 1) / 8 for j in range(FEATURES)])
    b_true = 0.5
    x = torch.randn(SAMPLES, FEATURES, generator=gen)
    y = x @ w_true + b_true + NOISE * torch.randn(SAMPLES, generator=gen)
    return x, y.unsqueeze(1), torch.cat([w_true, torch.tensor([b_true])])


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE") if v not in os.environ]
    if missing:
        print(f"ddp_train: {', '.join(missing)} not set: run under muster "
              "(muster --standalone --nproc-per-node=2 /usr/bin/python3 ddp_train.py)", file=sys.stderr)
        return 1
    dist.init_process_group("gloo", init_method="env://")
    rank, size = dist.get_rank(), dist.get_world_size()

    x, y, w_true = make_problem()
    x_shard, y_shard = x[rank::size], y[rank::size]

    linear = torch.nn.Linear(FEATURES, 1)
    with torch.no_grad():  # Start from zero, as train.cc does.
        linear.weight.zero_()
        linear.bias.zero_()
    model = DistributedDataParallel(linear)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    def global_loss():
        """The mean squared error over all samples (sums all-reduced, as train.cc does)."""
        with torch.no_grad():
            sums = torch.tensor([((linear(x_shard) - y_shard) ** 2).sum().item(), len(x_shard)],
                                dtype=torch.float64)
        dist.all_reduce(sums)
        return (sums[0] / sums[1]).item()

    first_loss = global_loss()
    for _ in range(args.epochs):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x_shard), y_shard)
        loss.backward()  # DDP averages the gradients over the ranks here.
        optimizer.step()
    final_loss = global_loss()

    params = flat_params(linear)
    digest = hashlib.sha256(params.numpy().tobytes()).hexdigest()[:8]
    distance = torch.linalg.norm(params - w_true).item()
    print(f"rank {rank}/{size}: loss {first_loss:.1e} -> {final_loss:.1e} after {args.epochs} steps, "
          f"params sum {params.sum().item():.6f}, sha256 {digest}, |w - w_true| {distance:.3f}",
          flush=True)

    gathered = [torch.empty_like(params) for _ in range(size)]
    dist.all_gather(gathered, params)
    differ = [r for r, p in enumerate(gathered) if not torch.equal(p, params)]
    ok = True
    if differ:
        print(f"ddp_train rank {rank}/{size}: parameters differ from those of rank(s) {differ}",
              file=sys.stderr)
        ok = False
    if not final_loss < first_loss:
        print(f"ddp_train rank {rank}/{size}: the loss did not fall ({first_loss:.3e} -> {final_loss:.3e})",
              file=sys.stderr)
        ok = False
    if ok and rank == 0 and size > 1:
        print(f"all {size} ranks agree on the parameters", flush=True)
    # Every rank is past its last collective before any tears its group down:
    # destroying a gloo group while a peer is still using it can hang
    # (pytorch/pytorch#75097).
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
