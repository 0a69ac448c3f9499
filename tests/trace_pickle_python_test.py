#!/usr/bin/env python3
"""coop's snapshot reader against Python's own pickler and an independent
reading of the snapshot semantics (traces/README.md).

Builds a random memory snapshot shaped like torch.cuda.memory._dump_snapshot()
output (ring-buffer start, several streams, segment events, oom, actions coop
skips, shared frame strings, batches of more than 1000 items, long strings),
pickles it with protocols 2 to 5, plain and gzip, converts each with
`coop convert` and compares the event lines with what this script expects.
Seed: COOP_TEST_SEED (printed; tests/coop_test_seed.py).
"""
import gzip
import os
import pickle
import random
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import coop_test_seed  # noqa: E402  (this script's directory)

COOP = os.environ.get("COOP", "./coop")


def make_snapshot(rng):
    frames = [{"name": "forward", "filename": "model.py" * 40, "line": 54}]
    trace, live, segments = [], {}, []
    t = 1_700_000_000_000_000
    # 2^41 bytes apart: the largest block (2^40 + 3 bytes) overlaps no other,
    # as an allocator's live blocks never do (the reader refuses that); one
    # address is live on one stream at a time
    addr_pool = [0x7F0000000000 + (i << 41) for i in range(400)]
    # blocks allocated before recording began: some freed in the trace,
    # some still allocated at the end. Each in a MiB of its own, below
    # addr_pool: such blocks were all live when recording began, so they
    # overlap neither each other nor a block the trace allocates before
    # freeing them (the reader refuses that), whatever the trace's sizes.
    before = [0x7D0000000000 + (i << 20) for i in rng.sample(range(400), 60)]
    for a in before:
        live[(a, 0)] = ("R" if rng.random() < 0.3 else "A", rng.randrange(1, 1 << 20))
    for _ in range(3000):
        t += rng.randrange(1, 50)
        r = rng.random()
        stream = rng.choice([0, 0, 0, 7, 2**63 + 5])
        if r < 0.45:
            held = {k[0] for k in live}
            free = [a for a in addr_pool if a not in held]
            if not free:
                continue
            a = rng.choice(free)
            size = rng.choice([1, 300, 70000, 1 << 30, 2**40 + 3])
            live[(a, stream)] = ("A", size)
            trace.append({"action": "alloc", "addr": a, "size": size, "stream": stream,
                          "time_us": t, "frames": frames})
        elif r < 0.9 and live:
            key = rng.choice(sorted(live))
            state, size = live[key]
            if state == "A":
                live[key] = ("R", size)
                action = "free_requested"
            else:
                del live[key]
                action = "free_completed"
            trace.append({"action": action, "addr": key[0], "size": size, "stream": key[1],
                          "time_us": t, "frames": frames})
        elif r < 0.95:
            action = rng.choice(["segment_alloc", "segment_free", "segment_map", "segment_unmap"])
            trace.append({"action": action, "addr": 0x7E0000000000 + rng.randrange(1 << 30),
                          "size": 2 << 20, "stream": stream, "time_us": t, "frames": []})
        elif r < 0.97:
            trace.append({"action": "oom", "size": 1 << 34, "stream": 0, "device_free": 5,
                          "time_us": t, "frames": []})
        else:
            trace.append({"action": rng.choice(["snapshot", "something_new"]), "addr": 0,
                          "size": 0, "stream": 0, "time_us": t, "frames": []})
    # final segments: every still-allocated block, one per segment of whole
    # MiBs that its blocks tile (the reader refuses a block outside its
    # segment, and segments that overlap: a MiB each for the blocks from
    # before recording, 2^41 bytes apart for the others)
    for (a, stream), (state, size) in sorted(live.items()):
        block_size = size + 511 & ~511
        total = block_size + 0xFFFFF & ~0xFFFFF
        blocks = [{"address": a, "size": block_size, "requested_size": size,
                   "state": "active_allocated" if state == "A" else "active_pending_free",
                   "frames": []}]
        if total > block_size:
            blocks.append({"address": a + block_size, "size": total - block_size,
                           "requested_size": 0, "state": "inactive"})
        segments.append({"device": 0, "address": a, "total_size": total, "stream": stream,
                         "segment_type": "large", "segment_pool_id": (0, 0), "frames": [],
                         "blocks": blocks})
    segments.append({"device": 1, "address": 0x10, "total_size": 1, "stream": 0, "blocks": []})
    return {"segments": segments, "device_traces": [trace, []],
            "allocator_settings": {"expandable_segments": False, "max_split_size": -1,
                                   "garbage_collection_threshold": 0.0},
            "external_annotations": []}


def expected_lines(snap):
    """The text trace the README's rules give, without comments."""
    events, live, live_at_start = [], {}, []
    count = [0]

    def new_id():
        count[0] += 1
        return count[0] - 1

    kinds = {"segment_alloc": "S", "segment_free": "U", "segment_map": "M",
             "segment_unmap": "N"}
    for e in snap["device_traces"][0]:
        a, key, t = e["action"], (e.get("addr", 0), e["stream"]), e["time_us"]
        if a == "alloc":
            raw = new_id()
            live[key] = [raw, "A"]
            events.append(("A", raw, e["size"], e["stream"], e["addr"], t))
        elif a in ("free_requested", "free_completed"):
            if key not in live:
                raw = new_id()
                live_at_start.append((key[0], raw, e["size"], key[1]))
                live[key] = [raw, "A"]
            raw = live[key][0]
            if a == "free_requested":
                live[key][1] = "R"
                events.append(("R", raw, t))
            else:
                del live[key]
                events.append(("F", raw, t))
        elif a in kinds:
            events.append((kinds[a], e["addr"], e["size"], e["stream"], t))
        elif a == "oom":
            events.append(("O", e["size"], e["stream"], t))
    finals = []
    for s in snap["segments"]:
        if s.get("device", 0) != 0:
            continue
        finals.append("E 0x%x %d %d" % (s["address"], s["total_size"], s["stream"]))
        for b in s["blocks"]:
            if b["state"] in ("active_allocated", "active_pending_free") and \
                    (b["address"], s["stream"]) not in live:
                live_at_start.append((b["address"], new_id(), b["requested_size"], s["stream"]))
    live_at_start.sort()
    dense = {}

    def renumber(raw):
        return dense.setdefault(raw, len(dense))

    lines = []
    for addr, raw, size, stream in live_at_start:
        lines.append("L %d %d %d addr=0x%x" % (renumber(raw), size, stream, addr))
    for e in events:
        if e[0] == "A":
            lines.append("A %d %d %d addr=0x%x t=%d" % (renumber(e[1]), e[2], e[3], e[4], e[5]))
        elif e[0] in "RF":
            lines.append("%s %d t=%d" % (e[0], dense[e[1]], e[2]))
        elif e[0] == "O":
            lines.append("O %d %d t=%d" % e[1:])
        else:
            lines.append("%s 0x%x %d %d t=%d" % e)
    settings = []
    if "allocator_settings" in snap:
        # the P line: the settings that are not PyTorch's defaults, in coop's order
        conf = snap["allocator_settings"]
        if conf.get("expandable_segments", False):
            settings.append("expandable_segments")
        if conf.get("max_split_size", -1) != -1:
            settings.append("max_split_size")
        if any(conf.get("roundup_power2_divisions", []) or []):
            settings.append("roundup_power2_divisions")
        if conf.get("garbage_collection_threshold", 0.0) != 0.0:
            settings.append("garbage_collection_threshold")
        settings = [" ".join(["P torch"] + settings)]
        if conf.get("allocator") == "coop":  # coop.torch's snapshot: its segments are coop's
            settings = ["P coop"]
    return ["coop-trace 1"] + settings + lines + finals


def main():
    seed = coop_test_seed.read_seed("trace_pickle_python_test", 4242)
    snap = make_snapshot(random.Random(seed))
    want = expected_lines(snap)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for proto in (2, 3, 4, 5):
            for compress in (False, True):
                path = os.path.join(tmp, "s%d.pickle%s" % (proto, ".gz" if compress else ""))
                data = pickle.dumps(snap, protocol=proto)
                with (gzip.open if compress else open)(path, "wb") as f:
                    f.write(data)
                run = subprocess.run([COOP, "convert", path, "-"], capture_output=True, text=True)
                got = [l for l in run.stdout.splitlines() if not l.startswith("#")]
                if run.returncode != 0 or got != want:
                    failures += 1
                    print("FAIL protocol %d%s: exit %d %s" % (proto, " gz" if compress else "",
                                                              run.returncode, run.stderr.strip()))
                    for i, (g, w) in enumerate(zip(got, want)):
                        if g != w:
                            print("  line %d: got %r, want %r" % (i + 1, g, w))
                            break
                    else:
                        print("  %d lines, want %d" % (len(got), len(want)))
        # the same data behind a pickle that calls a function is refused
        path = os.path.join(tmp, "evil.pickle")
        with open(path, "wb") as f:
            f.write(pickle.dumps((snap, os.getcwd), protocol=4))
        run = subprocess.run([COOP, "convert", path, "-"], capture_output=True, text=True)
        if run.returncode != 2 or "STACK_GLOBAL (0x93) is not allowed" not in run.stderr:
            failures += 1
            print("FAIL: pickle with a global: exit %d %s" % (run.returncode, run.stderr))
    print("trace_pickle_python_test: %d event lines, %d failures" % (len(want) - 1, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
