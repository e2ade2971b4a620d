"""What the tests share. Imported before anything of the session imports torch (the first `support`
import is in tests/conftest.py), so the thread settings below reach every process of the session.

Every process of the session computes on one intra-op thread (`OMP_NUM_THREADS`, inherited by every
process the tests start), as the local network's nodes do (`distrai.localnet.network.Localnet.env`):
the session runs a dozen processes on a few cores, and an OpenMP thread that waits at a barrier for a
peer the scheduler has put aside spins through its time slice. Measured one after the other with
three busy processes beside them (2 cores), tests/test_validator_replay.py but its bfloat16 test
took 92 CPU-s and 267 s at the default two threads, 39 CPU-s and 135 s at one. Tests of the thread
count set it themselves.
"""

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
if "torch" in sys.modules:  # imported before this package: it read the variables already
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
