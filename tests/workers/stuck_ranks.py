"""A Python worker for `muster stacks` (issue 28): rank MUSTER_TEST_STUCK_RANK
(default 3) blocks in stuck_in_data_loader(), every other rank in
wait_in_allreduce(); a helper thread sleeps in background_prefetch()."""
import os
import signal
import sys
import threading
import time


def background_prefetch():
    while True:
        time.sleep(1)


def stuck_in_data_loader():
    while True:
        time.sleep(0.2)


def wait_in_allreduce():
    while True:
        time.sleep(0.2)


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    rank = int(os.environ.get("RANK", "0"))
    stuck = int(os.environ.get("MUSTER_TEST_STUCK_RANK", "3"))
    threading.Thread(target=background_prefetch, daemon=True).start()
    print("rank %d started" % rank, flush=True)
    if rank == stuck:
        stuck_in_data_loader()
    else:
        wait_in_allreduce()


if __name__ == "__main__":
    main()
