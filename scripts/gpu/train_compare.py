#!/usr/bin/env python3
"""Native caching allocator vs coop on real training, one JSON line each.

For torchvision ResNet-50 and a GPT-2-small-sized transformer (12 layers,
d_model 768, 12 heads, context 512, vocabulary 50257): --steps steps with
the same seed under each allocator (losses, step times, peak reserved and
allocated), then the largest batch that trains 3 steps under a fixed memory
fraction (--fraction, default 0.5). Every run is a child process, since
PyTorch takes an allocator once per process.

    scripts/gpu/train_compare.py [--model M] [--steps 50] [--fraction 0.5]
        [--conf CONF] [--native-conf CONF] [--out FILE] [--deadline S] [--no-max-batch]
        [--no-compare] [--search both|native|coop] [--hint N] [--dry-run]
        [--snapshot DIR]

Lines: {"summary": "environment"} first; per run {"model", "allocator",
"batch", "steps", "ok", "losses", "step_times_ms", "step_time_ms_median",
"peak_reserved_bytes", "peak_allocated_bytes", ...}; per model
{"summary": "native_vs_coop"} (loss difference, step-time ratio, peaks) and
per model and allocator {"summary": "max_batch"} (with every probe).

--native-conf CONF runs the native allocator with PYTORCH_CUDA_ALLOC_CONF=CONF
(e.g. expandable_segments:True, PyTorch's own answer to fragmentation), so
coop is compared with that configuration; the native lines and summaries
carry "native_conf", and the native full runs "native_settings" (torch's
allocator_settings as its snapshot reports them, proof the setting took).

--snapshot DIR records the full runs' allocation history from before the
model is built (native: torch.cuda.memory._record_memory_history; coop:
coop.torch.record_history) and writes each run's snapshot as
DIR/<model>-<allocator>.pickle.gz ("snapshot" in its line, with its event
count; native's "snapshot_complete" is false when its ring of
record_cuda_snapshot.MAX_ENTRIES events filled, so the first were lost): `coop replay`
then replays the whole process's allocations on the host, so a peak
measured here can be reproduced, and attributed, there.

Determinism: same seed, cudnn.benchmark off (its search calls the
allocator's cacheInfo, which CUDAPluggableAllocator refuses), cudnn
deterministic, torch.use_deterministic_algorithms(warn_only) and
CUBLAS_WORKSPACE_CONFIG=:4096:8, so the two allocators' losses should agree.

Exits 77 with a one-line message when there is no CUDA device (unless
--dry-run: then everything runs on the CPU with fake measurements).
"""

import argparse
import math
import os
import pickle
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

MODELS = {
    # name: (default batch, batch search upper bound)
    "resnet50": (64, 2048),
    "gpt2_small": (8, 512),
}
GPT = {"vocab": 50257, "ctx": 512, "d": 768, "heads": 12, "layers": 12}
DRY_GPT_CTX = 16  # --dry-run: a short context keeps the CPU step quick
PROBE_STEPS = 3  # steps a max-batch probe must complete

# --dry-run's fake device: a batch fits when batch * bytes per sample is at
# most fraction * FAKE_DEVICE_BYTES (coop 5% better, to exercise the summary).
FAKE_DEVICE_BYTES = 80 << 30
FAKE_SAMPLE_BYTES = {"resnet50": 100 << 20, "gpt2_small": 600 << 20}
FAKE_COOP_GAIN = 1.05


def build(model, batch, device, seed, ctx=None):
    """(loss_fn, optimizer, batch description): model, optimizer and one
    fixed batch, deterministic for a seed. ctx shortens the GPT context."""
    import torch
    import torch.nn as nn

    torch.manual_seed(seed)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    if model == "resnet50":
        import torchvision

        net = torchvision.models.resnet50(num_classes=1000).to(device)
        x = torch.randn(batch, 3, 224, 224, generator=gen).to(device)
        y = torch.randint(0, 1000, (batch,), generator=gen).to(device)
        shapes = {"input": list(x.shape), "target": list(y.shape)}

        def loss_fn():
            return nn.functional.cross_entropy(net(x), y)
    elif model == "gpt2_small":
        vocab, d, heads, layers = GPT["vocab"], GPT["d"], GPT["heads"], GPT["layers"]
        ctx = ctx or GPT["ctx"]

        class Gpt(nn.Module):
            def __init__(self):
                super().__init__()
                self.tok = nn.Embedding(vocab, d)
                self.pos = nn.Embedding(ctx, d)
                layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0,
                                                   activation="gelu", batch_first=True,
                                                   norm_first=True)
                self.blocks = nn.TransformerEncoder(layer, layers)
                self.norm = nn.LayerNorm(d)
                self.head = nn.Linear(d, vocab, bias=False)

            def forward(self, tokens):
                n = tokens.shape[1]
                mask = torch.triu(torch.full((n, n), float("-inf"), device=tokens.device), 1)
                pos = torch.arange(n, device=tokens.device)
                h = self.blocks(self.tok(tokens) + self.pos(pos), mask=mask)
                return self.head(self.norm(h))

        net = Gpt().to(device)
        tokens = torch.randint(0, vocab, (batch, ctx + 1), generator=gen).to(device)
        shapes = {"tokens": list(tokens.shape)}

        def loss_fn():
            logits = net(tokens[:, :-1])
            return nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                               tokens[:, 1:].reshape(-1))
    else:
        raise ValueError(f"unknown model {model!r}")
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    return loss_fn, opt, shapes


def fake_fits(model, allocator, batch, fraction):
    """--dry-run's stand-in for 'the batch trains under this fraction'."""
    limit = (fraction or 1.0) * FAKE_DEVICE_BYTES * (FAKE_COOP_GAIN if allocator == "coop" else 1)
    return batch * FAKE_SAMPLE_BYTES[model] <= limit


def set_determinism(torch):
    """Same results under both allocators. Deterministic mode would also
    fill every torch.empty with NaN (torch >= 2.1,
    torch.utils.deterministic.fill_uninitialized_memory): an extra kernel
    per allocation that would dilute the allocators' difference; off."""
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        import torch.utils.deterministic as deterministic
    except ImportError:  # torch < 2.1: no filling
        return
    deterministic.fill_uninitialized_memory = False


def dry_child(args, record):
    """The child's work without a device: real model construction and
    (for the full runs) two real CPU steps at batch 1, fake peaks; max-batch
    probes only answer fake_fits, without torch."""
    fits = fake_fits(args.model, args.allocator, args.batch, args.fraction)
    # what torch would read here: shows --native-conf reached the native
    # children, and only them
    record["dry_alloc_conf_env"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    if args.steps > PROBE_STEPS:  # a full run: build and step the model on the CPU
        import torch

        set_determinism(torch)
        loss_fn, opt, shapes = build(args.model, 1, "cpu", args.seed, ctx=DRY_GPT_CTX)
        losses, times = [], []
        for _ in range(2):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = loss_fn()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
            losses.append(float(loss.item()))
        record.update(batch_shapes=shapes, losses=losses,
                      step_times_ms=[1e3 * t for t in times],
                      step_time_ms_median=1e3 * statistics.median(times))
    if not fits:
        record.update(ok=False, oom=True, error="dry run: fake out of memory")
        return 3
    per_sample = FAKE_SAMPLE_BYTES[args.model]
    record.update(ok=True, peak_reserved_bytes=args.batch * per_sample,
                  peak_allocated_bytes=args.batch * per_sample * 9 // 10)
    if args.snapshot:
        record["snapshot"] = write_snapshot(args, {"segments": [], "device_traces": [[]],
                                                   "dry_run": True})
    return 0


def start_history(allocator):
    """Records every allocation from here on (no bound on the entries)."""
    if allocator == "coop":
        import coop.torch

        coop.torch.record_history(max_entries=sys.maxsize)
    else:
        sys.path.insert(0, os.path.join(common.TOP, "scripts"))
        import record_cuda_snapshot

        record_cuda_snapshot.start_history()


def take_snapshot(allocator):
    if allocator == "coop":
        import coop.torch

        return coop.torch.snapshot()
    import torch

    return torch.cuda.memory._snapshot()


def write_snapshot(args, snap):
    """snap to DIR/<model>-<allocator>.pickle.gz, atomically: a run that
    fails while writing leaves the previous run's snapshot."""
    path = os.path.join(args.snapshot, f"{args.model}-{args.allocator}.pickle.gz")
    with common.replacing(path, compress=True) as f:
        pickle.dump(snap, f, protocol=4)
    return path


def child(args):
    record = {"script": "train_compare", "model": args.model, "allocator": args.allocator,
              "batch": args.batch, "steps": args.steps, "fraction": args.fraction,
              "seed": args.seed, "dry_run": args.dry_run}
    if args.allocator == "native":
        record["native_conf"] = args.native_conf
        # sets PYTORCH_CUDA_ALLOC_CONF (before any CUDA work): a dry run checks it arrived
        common.install_allocator("native", None, args.native_conf)
    if args.dry_run:
        rc = dry_child(args, record)
        common.emit(record)
        return rc
    if args.allocator == "coop":
        common.install_allocator("coop", args.conf)  # before any CUDA work
    import torch

    set_determinism(torch)
    if args.allocator == "coop":
        record["coop_settings"] = common.coop_settings()
    try:
        if args.fraction:
            # float: torch refuses other types; under coop this reaches
            # coop_torch_memory_fraction (its capacity: fraction of the device)
            torch.cuda.set_per_process_memory_fraction(float(args.fraction), 0)
        device = torch.device("cuda", 0)
        if args.snapshot:
            start_history(args.allocator)
        loss_fn, opt, shapes = build(args.model, args.batch, device, args.seed)
        record["batch_shapes"] = shapes
        losses, times = [], []
        for _ in range(args.steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = loss_fn()
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            if common.oom_happened(args.allocator):
                raise MemoryError("coop: out of memory: " + last_coop_error())
            losses.append(float(loss.item()))
    except Exception as e:  # torch.cuda.OutOfMemoryError, CUDA errors after a NULL
        oom = isinstance(e, MemoryError) or "out of memory" in str(e).lower()
        if not oom and common.oom_happened(args.allocator):
            oom, e = True, MemoryError("coop: out of memory: " + last_coop_error())
        record.update(ok=False, oom=oom, error=(str(e).splitlines() or [""])[0][:300])
        common.emit(record)
        return 3
    warm = times[5:] if len(times) > 5 else times
    record.update(ok=True, losses=losses, step_times_ms=[round(1e3 * t, 4) for t in times],
                  step_time_ms_median=1e3 * statistics.median(warm),
                  peak_reserved_bytes=common.peak_reserved(args.allocator),
                  peak_allocated_bytes=common.peak_allocated(args.allocator))
    if args.allocator == "native" and args.native_conf and args.steps > PROBE_STEPS:
        record["native_settings"] = torch.cuda.memory._snapshot().get("allocator_settings")
    if args.snapshot:
        snap = take_snapshot(args.allocator)
        record["snapshot"] = write_snapshot(args, snap)
        record["snapshot_events"] = sum(len(t) for t in snap.get("device_traces", []))
        if args.allocator == "native":
            # the native ring keeps the last MAX_ENTRIES: a full one has lost the first
            # events, and a replay of it would start mid-run
            import record_cuda_snapshot

            record["snapshot_complete"] = (record["snapshot_events"]
                                           < record_cuda_snapshot.MAX_ENTRIES)
    common.emit(record)
    return 0


def last_coop_error():
    import coop.torch

    return coop.torch.last_error()


def run(args, model, allocator, batch, steps, fraction, snapshot=None):
    child_args = ["--model", model, "--allocator", allocator, "--batch", batch, "--steps", steps,
                  "--seed", args.seed, "--fraction", fraction]
    if snapshot:
        child_args += ["--snapshot", snapshot]
    result, rc, err = common.run_child(os.path.abspath(__file__), child_args, args)
    if result is None:
        result = {"script": "train_compare", "model": model, "allocator": allocator,
                  "batch": batch, "steps": steps, "fraction": fraction, "ok": False,
                  "not_run": rc == -2, "error": f"child exit {rc}: {err[-300:]}"}
    return result


def max_batch(args, model, allocator, fraction, hint=None):
    """The largest batch that trains PROBE_STEPS steps under fraction.

    Without hint: from the model's default batch, doubling (or halving) to
    a bracket, then bisection. With hint (the other allocator's result):
    from the hint, in steps of hint/32 that double (up or down) to a
    bracket, then bisection: a few probes when the two allocators are
    close. A summary line with every probe; complete is False when the
    deadline stopped the search (max_batch is then a lower bound)."""
    cap = MODELS[model][1]
    probes = []

    def fits(batch):
        r = run(args, model, allocator, batch, PROBE_STEPS, fraction)
        probes.append({"batch": batch, "ok": bool(r.get("ok")), "oom": r.get("oom"),
                       "error": None if r.get("ok") else r.get("error", "")[:200]})
        if r.get("not_run"):
            raise TimeoutError
        return bool(r.get("ok"))

    start = min(hint or MODELS[model][0], cap)
    lo, hi, complete = 0, None, True  # lo fits (0: none known), hi fails
    try:
        if fits(start):
            lo = start
            step = max(1, start // 32) if hint else start
            while lo < cap:
                b = min(lo + step, cap)
                if not fits(b):
                    hi = b
                    break
                lo, step = b, 2 * step
        else:
            hi = start
            step = max(1, start // 32) if hint else (start + 1) // 2
            while hi > 1:
                b = max(hi - step, 1)
                if fits(b):
                    lo = b
                    break
                hi, step = b, 2 * step
        while hi is not None and hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
    except TimeoutError:
        complete = False
        probes.pop()
    return {"script": "train_compare", "model": model, "allocator": allocator,
            "summary": "max_batch", "fraction": fraction, "max_batch": lo,
            "native_conf": args.native_conf if allocator == "native" else None,
            "first_failing_batch": hi, "capped": hi is None and lo >= cap,
            "complete": complete, "probe_steps": PROBE_STEPS, "probes": probes,
            "hint": hint, "dry_run": args.dry_run}


def loss_max_abs_diff(native, coop):
    """The largest difference of two runs' losses, step by step; NaN (null in
    the JSON line) where a loss is NaN: max() skipped a NaN after a number,
    so a diverged run read as 0."""
    diffs = [abs(a - b) for a, b in zip(native, coop)]
    return float("nan") if any(math.isnan(d) for d in diffs) else max(diffs)


def compare(model, runs):
    """The native_vs_coop summary of two ok runs (None otherwise)."""
    n, c = runs["native"], runs["coop"]
    if not (n.get("ok") and c.get("ok")):
        return None
    return {"script": "train_compare", "model": model, "summary": "native_vs_coop",
            "batch": n["batch"], "steps": n["steps"], "native_conf": n.get("native_conf"),
            "loss_max_abs_diff": loss_max_abs_diff(n["losses"], c["losses"]),
            "losses_identical": n["losses"] == c["losses"],
            "step_time_ratio_coop_over_native":
                c["step_time_ms_median"] / n["step_time_ms_median"],
            "step_time_ms_median_native": n["step_time_ms_median"],
            "step_time_ms_median_coop": c["step_time_ms_median"],
            "peak_reserved_native": n["peak_reserved_bytes"],
            "peak_reserved_coop": c["peak_reserved_bytes"],
            "peak_reserved_coop_over_native":
                c["peak_reserved_bytes"] / max(1, n["peak_reserved_bytes"]),
            "peak_allocated_native": n["peak_allocated_bytes"],
            "peak_allocated_coop": c["peak_allocated_bytes"]}


def parse(argv=None):
    p = common.arg_parser(__doc__)
    p.add_argument("--model", choices=sorted(MODELS), action="append",
                   help="model to run (repeatable; default: all)")
    p.add_argument("--allocator", choices=common.ALLOCATORS, default="native",
                   help=argparse.SUPPRESS)  # children's
    p.add_argument("--batch", type=int, default=0, help="batch of the full runs (default: "
                   + ", ".join(f"{m} {b}" for m, (b, _) in sorted(MODELS.items())) + ")")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--fraction", type=float, default=0.5,
                   help="memory fraction of the largest-batch search (default 0.5)")
    p.add_argument("--no-max-batch", action="store_true", help="skip the largest-batch search")
    p.add_argument("--no-compare", action="store_true", help="skip the full native/coop runs")
    p.add_argument("--search", choices=("both", "native", "coop"), default="both",
                   help="whose largest batch to search (default both; to finish a search "
                        "a deadline cut short)")
    p.add_argument("--hint", type=int, default=0,
                   help="start coop's search here (default: native's result of this run)")
    p.add_argument("--snapshot", metavar="DIR", default=None,
                   help="write each full run's allocation history as DIR/<model>-<allocator>"
                        ".pickle.gz (recorded from before the model is built)")
    common.add_parent_options(p)
    args = p.parse_args(argv)
    if args.child:
        if not args.model or args.batch < 1 or not 0.0 <= args.fraction <= 1.0:
            p.error("a child needs --model, --batch >= 1 and --fraction in [0, 1] (0: none)")
        return args
    if not 0.0 < args.fraction <= 1.0:
        p.error(f"--fraction must be in (0, 1], not {args.fraction}")
    if args.hint < 0:
        p.error("--hint must be a batch size")
    if args.steps < 1 or args.batch < 0:
        p.error("--steps must be at least 1 and --batch at least 0 (0: the model's default)")
    return args


def main(argv=None):
    args = parse(argv)
    if args.child:
        args.model = args.model[0]  # children take the fraction as given; 0: none
        return common.finish_child(child(args))
    if not args.dry_run:
        common.require_cuda("train_compare")
    if args.snapshot:
        args.snapshot = os.path.abspath(args.snapshot)
        try:
            os.makedirs(args.snapshot, exist_ok=True)
        except OSError as e:
            sys.stderr.write(f"train_compare.py: --snapshot {args.snapshot}: {e.strerror}\n")
            return 2
    common.start_parent(args, "train_compare")
    fraction = args.fraction
    for model in args.model or sorted(MODELS):
        if not args.no_compare:
            batch = args.batch or MODELS[model][0]
            runs = {a: run(args, model, a, batch, args.steps, 0.0, snapshot=args.snapshot)
                    for a in common.ALLOCATORS}
            for r in runs.values():
                common.emit(r)
            summary = compare(model, runs)
            if summary:
                common.emit(summary)
        if not args.no_max_batch:
            hint = args.hint or None
            for a in common.ALLOCATORS:  # native first; coop starts from its result
                if args.search not in ("both", a):
                    continue
                result = max_batch(args, model, a, fraction, hint=hint if a == "coop" else None)
                common.emit(result)
                if result["complete"] and result["max_batch"] > 0 and not result["capped"]:
                    hint = result["max_batch"]
    return 0


if __name__ == "__main__":
    sys.exit(main())
