#!/usr/bin/python3
"""A steady-state coop text trace for measuring how replay scales.

usage: tests/replay_steady_trace.py LIVE STEPS [SEED [DIVISOR]] > FILE.trace

LIVE allocations are made, then each of STEPS steps frees a random live one
and allocates a new one: the live set stays LIVE blocks, so a policy whose
calls cost O(log LIVE) shows the same instructions per call at any STEPS,
and one that walks its blocks shows them growing with LIVE. Sizes: 60% below
1 MiB, the rest 1 to 48 MiB, each divided by DIVISOR (default 1; 16 keeps
the address space small enough for valgrind). One stream. The seed (default
1) goes to stderr, so a run can be repeated.

tests/README.md, "Replay and the simulator", gives the figures measured with
it (callgrind instructions per malloc / free / stats call at LIVE 500, 2,000
and 8,000 with STEPS = 10 x LIVE).
"""
import random
import sys


def main(argv):
    if len(argv) not in (3, 4, 5):
        sys.stderr.write(__doc__)
        return 2
    live_count, steps = int(argv[1]), int(argv[2])
    seed = int(argv[3]) if len(argv) > 3 else 1
    divisor = int(argv[4]) if len(argv) > 4 else 1
    if live_count < 1 or steps < 0 or divisor < 1:
        sys.stderr.write("replay_steady_trace: LIVE >= 1, STEPS >= 0, DIVISOR >= 1\n")
        return 2
    sys.stderr.write(f"replay_steady_trace: seed {seed}\n")
    rng = random.Random(seed)

    def size():
        s = rng.randrange(1, 1 << 20) if rng.random() < 0.6 else rng.randrange(1 << 20, 48 << 20)
        return max(1, s // divisor)

    out = sys.stdout
    out.write("coop-trace 1\n")
    live = []
    next_id = 0
    for _ in range(live_count):
        out.write(f"A {next_id} {size()} 0\n")
        live.append(next_id)
        next_id += 1
    for _ in range(steps):
        i = rng.randrange(len(live))
        out.write(f"F {live[i]}\n")
        live[i] = next_id
        out.write(f"A {next_id} {size()} 0\n")
        next_id += 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
