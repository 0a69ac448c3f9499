#!/usr/bin/env python3
"""Native caching allocator vs coop on real training, one JSON line each.

For torchvision ResNet-50 and a GPT-2-small-sized transformer (12 layers,
d_model 768, 12 heads, vocabulary 50257): 50 steps with the same seed under
each allocator (losses, median step time, peak reserved), then the largest
batch that trains 3 steps under a fixed memory fraction. Every run is a
child process, since PyTorch takes an allocator once per process.

    scripts/gpu/train_compare.py [--steps 50] [--fraction 0.5] [--conf CONF]

Exits 77 with a message when there is no CUDA device.
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

MODELS = {
    # name: (default batch, batch search upper bound)
    "resnet50": (64, 1024),
    "gpt2_small": (8, 256),
}


def build(model, batch, device, seed):
    """Model, optimizer and a fixed batch; deterministic for a seed."""
    import torch
    import torch.nn as nn

    torch.manual_seed(seed)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    if model == "resnet50":
        import torchvision

        net = torchvision.models.resnet50(num_classes=1000).to(device)
        x = torch.randn(batch, 3, 224, 224, generator=gen).to(device)
        y = torch.randint(0, 1000, (batch,), generator=gen).to(device)

        def loss_fn():
            return nn.functional.cross_entropy(net(x), y)
    else:
        vocab, ctx, d, heads, layers = 50257, 512, 768, 12, 12

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

        def loss_fn():
            logits = net(tokens[:, :-1])
            return nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                               tokens[:, 1:].reshape(-1))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    return loss_fn, opt


def child(args):
    common.install_allocator(args.allocator, args.conf)
    import torch

    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    if args.fraction:
        torch.cuda.set_per_process_memory_fraction(args.fraction, 0)
    device = torch.device("cuda", 0)
    record = {"script": "train_compare", "model": args.model, "allocator": args.allocator,
              "batch": args.batch, "steps": args.steps, "fraction": args.fraction}
    try:
        loss_fn, opt = build(args.model, args.batch, device, args.seed)
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
                raise MemoryError("coop: out of memory")
            losses.append(float(loss.item()))
    except (RuntimeError, MemoryError) as e:  # torch.cuda.OutOfMemoryError is a RuntimeError
        record.update(ok=False, error=str(e).splitlines()[0][:300])
        common.emit(record)
        return 3
    warm = times[5:] if len(times) > 5 else times
    record.update(ok=True, losses=losses, step_time_ms_median=1e3 * statistics.median(warm),
                  peak_reserved_bytes=common.peak_reserved(args.allocator),
                  peak_allocated_bytes=common.peak_allocated(args.allocator))
    common.emit(record)
    return 0


def run(args, model, allocator, batch, steps, fraction):
    child_args = ["--model", model, "--allocator", allocator, "--batch", batch, "--steps", steps,
                  "--seed", args.seed, "--fraction", fraction]
    result, rc, err = common.run_child(os.path.abspath(__file__), child_args, args)
    if result is None:
        result = {"script": "train_compare", "model": model, "allocator": allocator,
                  "batch": batch, "ok": False, "error": f"child exit {rc}: {err[-300:]}"}
    return result


def max_batch(args, model, allocator):
    """Largest batch (doubling, then bisection) that runs 3 steps."""
    lo, hi = 0, 1
    while hi <= MODELS[model][1] and run(args, model, allocator, hi, 3, args.fraction)["ok"]:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if run(args, model, allocator, mid, 3, args.fraction)["ok"]:
            lo = mid
        else:
            hi = mid
    return lo


def main():
    p = common.arg_parser(__doc__)
    p.add_argument("--model", choices=sorted(MODELS), action="append")
    p.add_argument("--allocator", choices=common.ALLOCATORS, default="native")
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--fraction", type=float, default=0.0,
                   help="memory fraction for the largest-batch search (default 0.5)")
    common.add_parent_options(p)
    p.add_argument("--no-max-batch", action="store_true")
    args = p.parse_args()
    common.require_cuda("train_compare")
    if args.child:
        args.model = args.model[0]
        return child(args)
    models = args.model or sorted(MODELS)
    fraction = args.fraction or 0.5
    for model in models:
        batch = args.batch or MODELS[model][0]
        runs = {a: run(args, model, a, batch, args.steps, 0.0) for a in common.ALLOCATORS}
        for r in runs.values():
            common.emit(r)
        n, c = runs["native"], runs["coop"]
        if n.get("ok") and c.get("ok"):
            common.emit({
                "script": "train_compare", "model": model, "summary": "native_vs_coop",
                "loss_max_abs_diff": max(abs(a - b) for a, b in zip(n["losses"], c["losses"])),
                "step_time_ratio_coop_over_native":
                    c["step_time_ms_median"] / n["step_time_ms_median"],
                "peak_reserved_native": n["peak_reserved_bytes"],
                "peak_reserved_coop": c["peak_reserved_bytes"]})
        if not args.no_max_batch:
            args.fraction = fraction
            for a in common.ALLOCATORS:
                common.emit({"script": "train_compare", "model": model, "allocator": a,
                             "summary": "max_batch", "fraction": fraction,
                             "max_batch": max_batch(args, model, a)})
            args.fraction = 0.0
    return 0


if __name__ == "__main__":
    sys.exit(main())
