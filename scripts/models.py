"""Model definitions shared by the recording scripts (record_ops.py,
record_traces.py, record_cuda_snapshot.py), the loader of a user's own
workload (--workload FILE.py:FUNC: workload_function, user_workload), and the
one writer of their outputs (write_gz, over atomic_file).

Each workload is one full training step of a real model at a realistic size:
forward, loss, backward, optimizer step. Weights, inputs and targets come from
fixed seeds, so two recordings of the same workload run the same computation.

Sizes are chosen so one step stays within a minute or two on one CPU core of
Debian's python3-torch 1.13 (see traces/README.md, "Recorded traces"), while
keeping the published architecture dimensions (ResNet-50 / DenseNet-121 at
224x224, BERT-base and GPT-2-small widths and depths).

Usage from another script:
    import models
    w = models.build("resnet50", device="cpu")
    w.warm_up()                 # one untimed step: optimizer state exists
    loss = w.forward_loss()     # recorded step, split where BACKWARD goes
    w.backward(loss)
    w.optimizer_step()
"""

import gc
import importlib.machinery
import importlib.util
import inspect
import math
import os
import re
import sys
import threading
import traceback

import atomic_file
import interrupt  # noqa: F401  (Ctrl-C: one line, no traceback)
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 1234


class Workload:
    """A model, its batch and its optimizer; one training step in three parts
    (forward_loss, backward, optimizer_step) so recorders can mark the
    boundaries."""

    def __init__(self, name, model, inputs, target, loss_fn, optimizer, config):
        self.name = name
        self.model = model
        self.inputs = inputs  # tuple of positional model arguments
        self.target = target
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.config = config  # dict describing sizes, for the README
        self.source = None  # "FILE.py:FUNC" for a user's workload (user_workload)

    def forward_loss(self):
        out = self.model(*self.inputs)
        return self.loss_fn(out, self.target)

    def backward(self, loss):
        loss.backward()

    def optimizer_step(self):
        self.optimizer.step()

    def zero_grad(self):
        # set_to_none: the gradients are allocated by the backward pass of the
        # recorded step itself, as in PyTorch >= 2.0's default.
        self.optimizer.zero_grad(set_to_none=True)

    def _train(self):
        """zero_grad, forward_loss, backward, optimizer_step; the loss."""
        self.zero_grad()
        loss = self.forward_loss()
        self.backward(loss)
        self.optimizer_step()
        return loss

    def step(self):
        """One plain training step (no recording hooks)."""
        return float(self._train().detach())

    def recorded_step(self):
        """The step the recorders record: as step(), but the loss is not read
        back, and it is dropped and garbage collected before returning, so
        that only what outlives a step is left."""
        self._train()
        gc.collect()

    def warm_up(self):
        """Run one step so the optimizer state (momentum, Adam moments)
        exists, then drop the gradients: the recorded step is a
        steady-state step. A user's workload (source set) that raises here
        raises WorkloadError: the fault is in their model, loss or optimizer,
        and no recorder is running yet."""
        try:
            self.step()
        except WorkloadError:
            raise
        except (Exception, SystemExit) as e:  # noqa: BLE001 - any failure of the user's own step
            source = getattr(self, "source", None)
            if source is None:
                raise
            raise WorkloadError("%s: its training step raised %s" % (source, _user_exception(e, source))) from None
        self.zero_grad()

    def persistent_tensors(self):
        """(label, tensor) for everything alive across steps: parameters,
        buffers, optimizer state, the batch. Recorders treat these as live
        before the step."""
        seen = set()
        out = []

        def add(label, t):
            if isinstance(t, torch.Tensor) and id(t) not in seen:
                seen.add(id(t))
                out.append((label, t))

        for n, p in self.model.named_parameters():
            add("param:" + n, p)
        for n, b in self.model.named_buffers():
            add("buffer:" + n, b)
        names = {id(p): n for n, p in self.model.named_parameters()}
        for p, state in self.optimizer.state.items():
            for k, v in state.items():
                add("optim:%s:%s" % (names.get(id(p), "?"), k), v)
        for i, x in enumerate(self.inputs):
            add("input:%d" % i, x)
        add("target", self.target)
        return out


# ---------------------------------------------------------------- vision


def _vision(name, model, batch, size, classes, device, adamw=False):
    g = torch.Generator().manual_seed(SEED + 1)
    x = torch.randn(batch, 3, size, size, generator=g).to(device)
    y = torch.randint(0, classes, (batch,), generator=g).to(device)
    if adamw:  # vision transformers are trained with AdamW, not SGD
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
        opt_name = "AdamW"
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        opt_name = "SGD momentum 0.9, wd 1e-4"
    cfg = {"batch": batch, "input": "3x%dx%d" % (size, size), "optimizer": opt_name}
    return Workload(name, model, (x,), y, F.cross_entropy, opt, cfg)


def _torchvision(name, device, batch, adamw=False):
    """A torchvision classifier by its constructor's name, trained on 224x224
    images of 1000 classes, batch 32 unless told."""
    import torchvision

    torch.manual_seed(SEED)
    m = getattr(torchvision.models, name)(num_classes=1000).to(device).train()
    return _vision(name, m, batch or 32, 224, 1000, device, adamw=adamw)


def resnet50(device, batch=None):
    return _torchvision("resnet50", device, batch)


def densenet121(device, batch=None):
    return _torchvision("densenet121", device, batch)


# The models below were added for a held-out check of `coop sim` (docs/remat.md,
# "Held-out check"): shapes unlike the six above, recorded after coop's window
# cost had been tuned on those.


def mobilenet_v2(device, batch=None):
    return _torchvision("mobilenet_v2", device, batch)


def efficientnet_b0(device, batch=None):
    return _torchvision("efficientnet_b0", device, batch)


def vgg16(device, batch=None):
    return _torchvision("vgg16", device, batch)


def vit_b_16(device, batch=None):
    return _torchvision("vit_b_16", device, batch, adamw=True)


# A second held-out set (docs/remat.md, section 2, "Round 5"): the first one
# was looked at when coop's cost became c_live, so it no longer tests
# generalization. Recorded after that choice, never used to choose.


def resnet18(device, batch=None):
    return _torchvision("resnet18", device, batch)


def shufflenet_v2_x1_0(device, batch=None):
    return _torchvision("shufflenet_v2_x1_0", device, batch)


def convnext_tiny(device, batch=None):
    return _torchvision("convnext_tiny", device, batch, adamw=True)


def swin_t(device, batch=None):
    return _torchvision("swin_t", device, batch, adamw=True)


class DoubleConv(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        )


class UNet(nn.Module):
    """Classic 4-level U-Net (Ronneberger et al. 2015): 64-128-256-512
    channels down, a 1024-channel bottleneck, transposed-convolution
    upsampling with skip concatenation; padded convolutions and batch norm as
    in common implementations."""

    def __init__(self, in_ch=3, classes=2, width=64):
        super().__init__()
        chs = [width * 2**i for i in range(5)]  # 64 .. 1024
        self.downs = nn.ModuleList()
        c = in_ch
        for ch in chs[:-1]:
            self.downs.append(DoubleConv(c, ch))
            c = ch
        self.bottom = DoubleConv(chs[-2], chs[-1])
        self.ups = nn.ModuleList()
        self.up_convs = nn.ModuleList()
        for ch in reversed(chs[:-1]):
            self.ups.append(nn.ConvTranspose2d(ch * 2, ch, 2, stride=2))
            self.up_convs.append(DoubleConv(ch * 2, ch))
        self.head = nn.Conv2d(chs[0], classes, 1)

    def forward(self, x):
        skips = []
        for d in self.downs:
            x = d(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottom(x)
        for up, conv in zip(self.ups, self.up_convs):
            x = up(x)
            x = conv(torch.cat([skips.pop(), x], dim=1))
        return self.head(x)


def unet(device, batch=None):
    torch.manual_seed(SEED)
    batch = batch or 4
    size = 256
    m = UNet().to(device).train()
    g = torch.Generator().manual_seed(SEED + 1)
    x = torch.randn(batch, 3, size, size, generator=g).to(device)
    y = torch.randint(0, 2, (batch, size, size), generator=g).to(device)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.99)
    cfg = {"batch": batch, "input": "3x%dx%d" % (size, size), "classes": 2, "optimizer": "SGD momentum 0.99"}
    return Workload("unet", m, (x,), y, F.cross_entropy, opt, cfg)


# ---------------------------------------------------------------- language


class BertMLM(nn.Module):
    """BERT-base-sized encoder: 12 layers, d_model 768, 12 heads, FFN 3072,
    GELU, post-norm, token + position + segment embeddings, masked-LM head
    over the 30522-token vocabulary (decoder tied to the token embedding)."""

    def __init__(self, vocab=30522, d=768, heads=12, layers=12, ffn=3072, max_len=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.seg = nn.Embedding(2, d)
        self.norm = nn.LayerNorm(d)
        self.drop = nn.Dropout(0.1)
        layer = nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.transform = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d))
        self.decoder_bias = nn.Parameter(torch.zeros(vocab))
        for e in (self.tok, self.pos, self.seg):
            nn.init.normal_(e.weight, std=0.02)

    def forward(self, ids, pad_mask):
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.tok(ids) + self.pos(pos)[None] + self.seg(torch.zeros_like(ids))
        h = self.drop(self.norm(h))
        h = self.encoder(h, src_key_padding_mask=pad_mask)
        h = self.transform(h)
        return F.linear(h, self.tok.weight, self.decoder_bias)


def _mlm_loss(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100)


def bert(device, batch=None):
    torch.manual_seed(SEED)
    batch = batch or 16
    seq = 128
    vocab = 30522
    m = BertMLM(vocab=vocab).to(device).train()
    g = torch.Generator().manual_seed(SEED + 1)
    ids = torch.randint(1000, vocab, (batch, seq), generator=g)
    pad = torch.zeros(batch, seq, dtype=torch.bool)
    # 15% of positions are prediction targets, as in BERT pre-training.
    chosen = torch.rand(batch, seq, generator=g) < 0.15
    target = torch.where(chosen, ids, torch.full_like(ids, -100))
    ids = torch.where(chosen, torch.full_like(ids, 103), ids)  # [MASK]
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.01)
    cfg = {"batch": batch, "seq": seq, "layers": 12, "d_model": 768, "heads": 12, "vocab": vocab, "optimizer": "AdamW"}
    return Workload("bert", m, (ids.to(device), pad.to(device)), target.to(device), _mlm_loss, opt, cfg)


class GPT2(nn.Module):
    """GPT-2-small-sized decoder: 12 pre-norm layers, d_model 768, 12 heads,
    FFN 3072, GELU, causal self-attention mask, learned positions, 50257-token
    vocabulary with the output projection tied to the token embedding."""

    def __init__(self, vocab=50257, d=768, heads=12, layers=12, ffn=3072, max_len=1024):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.drop = nn.Dropout(0.1)
        layer = nn.TransformerEncoderLayer(
            d, heads, ffn, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        for e in (self.tok, self.pos):
            nn.init.normal_(e.weight, std=0.02)

    def forward(self, ids):
        seq = ids.shape[1]
        causal = torch.triu(torch.full((seq, seq), float("-inf"), device=ids.device), diagonal=1)
        pos = torch.arange(seq, device=ids.device)
        h = self.drop(self.tok(ids) + self.pos(pos)[None])
        h = self.blocks(h, mask=causal)
        return F.linear(self.norm(h), self.tok.weight)


def _lm_loss(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def gpt2(device, batch=None):
    torch.manual_seed(SEED)
    batch = batch or 4
    seq = 512
    vocab = 50257
    m = GPT2(vocab=vocab).to(device).train()
    g = torch.Generator().manual_seed(SEED + 1)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.1)
    cfg = {"batch": batch, "seq": seq, "layers": 12, "d_model": 768, "heads": 12, "vocab": vocab, "optimizer": "AdamW"}
    return Workload(
        "gpt2", m, (tokens[:, :-1].contiguous().to(device),), tokens[:, 1:].contiguous().to(device), _lm_loss, opt, cfg
    )


class LSTMLM(nn.Module):
    """Word-level LSTM language model (as PyTorch's word_language_model
    example, 'large' setting): embedding, 2-layer LSTM, dropout, linear
    decoder over a WikiText-2-sized vocabulary."""

    def __init__(self, vocab=33278, emb=1024, hidden=1024, layers=2, dropout=0.5):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.drop = nn.Dropout(dropout)
        self.rnn = nn.LSTM(emb, hidden, layers, dropout=dropout)
        self.dec = nn.Linear(hidden, vocab)

    def forward(self, ids):  # ids: (seq, batch)
        out, _ = self.rnn(self.drop(self.emb(ids)))
        return self.dec(self.drop(out))


def lstm(device, batch=None):
    torch.manual_seed(SEED)
    batch = batch or 64
    seq = 35
    vocab = 33278
    m = LSTMLM(vocab=vocab).to(device).train()
    g = torch.Generator().manual_seed(SEED + 1)
    tokens = torch.randint(0, vocab, (seq + 1, batch), generator=g)
    opt = torch.optim.SGD(m.parameters(), lr=20.0, momentum=0.9)
    cfg = {"batch": batch, "seq": seq, "layers": 2, "hidden": 1024, "vocab": vocab, "optimizer": "SGD momentum 0.9"}
    return Workload(
        "lstm", m, (tokens[:-1].contiguous().to(device),), tokens[1:].contiguous().to(device), _lm_loss, opt, cfg
    )


# ---------------------------------------------------------------- a user's own workload


class WorkloadError(Exception):
    """A --workload FILE.py:FUNC that cannot be recorded; the message is one
    line that names it and says why."""


WORKLOAD_FIELDS = ("model", "inputs", "target", "loss_fn", "optimizer")
WORKLOAD_EXPECTED = (
    "expected a models.Workload, a tuple (model, inputs, target, loss_fn, optimizer[, name]) "
    "or a dict with those keys"
)


def _user_exception(e, source):
    """'Type: message (FILE line N)', on one line: the message's lines
    joined, cut at 300 characters; the line is the deepest frame in the
    user's file, where there is one."""
    text = "; ".join(line.strip() for line in str(e).splitlines() if line.strip())
    if len(text) > 300:
        text = text[:297] + "..."
    out = type(e).__name__ + (": " + text if text else "")
    path = os.path.abspath(source.rpartition(":")[0])
    frames = [f for f in traceback.extract_tb(e.__traceback__) if os.path.abspath(f.filename) == path]
    if isinstance(e, SyntaxError) and e.filename and os.path.abspath(e.filename) == path:
        return out  # the message already ends with the line
    if frames:
        out += " (%s line %d)" % (os.path.basename(path), frames[-1].lineno)
    return out


_SCRIPTS = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
_OURS = sorted(n[:-3] for n in os.listdir(_SCRIPTS) if n.endswith(".py"))  # names a user's module may shadow


def _roots(name, origin, is_package, search=()):
    """The real folders on sys.path where module `name` (dotted) is found:
    the one holding its top-level file or package, from the module's file
    (origin) or, for a namespace package (no origin), its search folders."""
    up = name.count(".") + (1 if is_package else 0)
    dirs = [os.path.dirname(origin)] if origin else list(search)
    for _ in range(up):
        dirs = [os.path.dirname(d) for d in dirs]
    return {os.path.realpath(d) for d in dirs}


def _module_roots(name, module):
    """_roots of a module in sys.modules; empty for a built-in one, or one
    that will not say."""
    try:
        origin = getattr(module, "__file__", None)
        is_package = hasattr(module, "__path__")
        if origin and is_package and not os.path.basename(origin).startswith("__init__."):
            return set()  # a package with a file that is not its __init__: no folder to name
        return _roots(name, origin, is_package, () if origin else getattr(module, "__path__", ()))
    except Exception:  # noqa: BLE001 - a module object of any kind: an odd one is nobody's
        return set()


class _ModuleView:
    """What `import NAME` gives a user's file, and everything that runs
    while it is in force (with view: ...): its import, FUNC's call and
    every method of its workload, the training step included (bind). As
    python3 FILE would have it: FILE's folder first on sys.path (then
    sys.path as the user's code leaves it), so that its sibling modules
    (models.py, utils.py, a package) win over coop's scripts/ modules of
    the same name (this models.py). Each file has its own view: the
    modules found in its folder and the folders it put on sys.path are
    kept here between runs, apart from another file's of the same name
    (its folder's even where coop's sys.path has that folder too).
    Outside, sys.path and sys.modules are coop's again (coop's code
    imports models lazily, record_traces.record for one), with the modules
    the user's code imported from elsewhere (torch's, a library's) left
    loaded for all. Threads may enter it at once (the user's own threads
    calling the workload's methods): it is in force, for every thread of
    the process, from the first one's entry to the last one's exit."""

    def __init__(self, path):
        self.folder = os.path.dirname(os.path.abspath(path))
        self.sys_path = None  # sys.path as the user's code last left it; None: never run
        self.modules = {}  # name -> module: this file's own modules, out of sys.modules between runs
        self.depth = 0  # a method calling another enters once, and so do threads
        # Threads of the user's (a prefetch thread calling self.batch()) may
        # enter and leave at once: the view is in force while any is inside,
        # put back when the last leaves. The lock guards the count and the
        # saved state only; no user code runs under it.
        self.lock = threading.Lock()

    def __enter__(self):
        with self.lock:
            return self._enter_locked()

    def __exit__(self, *exc):
        with self.lock:
            return self._exit_locked()

    def _enter_locked(self):
        if self.depth:
            self.depth += 1
            return self
        path = list(self.sys_path) if self.sys_path is not None else [self.folder] + sys.path
        shadowed = []  # coop's modules that `import NAME` would find elsewhere on path: the user's
        for name in _OURS:
            module = sys.modules.get(name)
            if module is None or _module_roots(name, module) != {_SCRIPTS}:
                continue
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and _roots(name, spec.origin if spec.has_location else None,
                                           spec.submodule_search_locations is not None,
                                           spec.submodule_search_locations or ()) != {_SCRIPTS}:
                shadowed.append(name)
        # nothing above changed sys.path or sys.modules: a failure leaves them as they were
        self.depth = 1
        self.before = dict(sys.modules)
        self.saved_path = (sys.path, list(sys.path))
        sys.path[:] = path
        self.evicted = {name: sys.modules.pop(name) for name in shadowed}
        sys.modules.update(self.modules)
        return self

    def _exit_locked(self):
        self.depth -= 1
        if self.depth:
            return False
        saved, entries = self.saved_path
        self.sys_path = list(sys.path)
        changed = [(name, module) for name, module in sys.modules.items() if self.before.get(name) is not module]
        roots = set()
        if changed:  # the folders this view put on sys.path hold its own modules, and FILE's folder
            # always, even where coop's sys.path has it too (PYTHONPATH=., a driver beside FILE)
            roots = ({os.path.realpath(p or ".") for p in self.sys_path} -
                     {os.path.realpath(p or ".") for p in entries} | {os.path.realpath(self.folder)}) - {_SCRIPTS}
        self.modules = {}
        for name, module in changed:
            if _module_roots(name, module) & roots:
                self.modules[name] = module
                if name in self.before:
                    sys.modules[name] = self.before[name]
                else:
                    del sys.modules[name]
        sys.modules.update(self.evicted)
        sys.path = saved
        sys.path[:] = entries
        self.before = self.evicted = None
        return False

    def bind(self, workload):
        """Makes every method of workload (a Workload, or the user's
        subclass of it) run in this view: their code may import at step
        time too."""
        for name, member in vars(Workload).items():
            if callable(member) and not name.startswith("__"):
                setattr(workload, name, self._running(getattr(workload, name)))

    def _running(self, fn):
        def run(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return run


class _InView:
    """What workload_function returns: the user's FUNC, called in its file's
    _ModuleView (view, which user_workload binds the workload to)."""

    def __init__(self, fn, view):
        self.fn = fn
        self.view = view

    def __call__(self, *args, **kwargs):
        with self.view:
            return self.fn(*args, **kwargs)


_USER_FILES = {}  # real path -> (module, view): a file that several --workload options name is imported once


def _import_user_file(spec, path):
    """(module, view): FILE imported as python3 FILE would, in its own
    _ModuleView: its folder first on sys.path, its own sibling modules
    winning over coop's scripts/ modules of the same name (a user's
    models.py over this one) and over another file's."""
    name = "coop_user_workload_%d" % len(_USER_FILES)
    loader = importlib.machinery.SourceFileLoader(name, path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    view = _ModuleView(path)
    sys.modules[name] = module  # before the view: coop's for good, by a name no file has
    try:
        with view:
            loader.exec_module(module)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's file failed to import (or exited)
        sys.modules.pop(name, None)
        hint = "; code that runs when FILE is imported belongs under if __name__ == \"__main__\":" \
            if isinstance(e, SystemExit) else ""
        raise WorkloadError("%s: importing %s raised %s%s" % (spec, path, _user_exception(e, spec), hint)) from None
    _USER_FILES[os.path.realpath(path)] = module, view
    return module, view


def refuse(ap, error):
    """Exits 2 with one line naming the user's workload and what is wrong
    with it (no usage text, no traceback): the recorders' way to report a
    WorkloadError."""
    ap.exit(2, "%s: error: --workload %s\n" % (ap.prog, error))


def claim_name(recorded, name, label, output):
    """Notes in recorded ({name: label}) that this run writes NAME's output
    (a "log", a "trace"), from label; raises WorkloadError when an earlier
    workload of the run has that name: its output would be replaced."""
    if name in recorded:
        raise WorkloadError(
            "%s: its name %r is %s's too, and the second %s would replace the first; give it another "
            "name (a sixth item of the tuple, or the dict's \"name\")" % (label, name, recorded[name], output)
        )
    recorded[name] = label


def workload_function(spec):
    """The function FUNC of spec "FILE.py:FUNC", from FILE imported as a
    module (this runs the user's code, on purpose: it is theirs) with its
    folder first on sys.path, as python3 FILE would (_import_user_file).
    Raises WorkloadError for a spec without FUNC, a missing file, an import
    that raises or exits, no callable FUNC in it, or a FUNC that cannot be
    called as FUNC(device, batch)."""
    path, colon, func = spec.rpartition(":")
    if not colon or not path or not func:
        raise WorkloadError("%s: expected FILE.py:FUNC (the file defining your workload, the function building it)"
                            % spec)
    if not os.path.isfile(path) and os.path.isfile(os.path.expanduser(path)):
        path = os.path.expanduser(path)  # "~/x.py" quoted, or in --workload=~/x.py: no shell expanded it
    if not os.path.isfile(path):
        raise WorkloadError("%s: no such file: %s" % (spec, path))
    module, view = _USER_FILES.get(os.path.realpath(path)) or _import_user_file(spec, path)
    fn = getattr(module, func, None)
    if not callable(fn):
        defined = sorted(k for k, v in vars(module).items()
                         if inspect.isfunction(v) and not k.startswith("_") and v.__module__ == module.__name__)
        raise WorkloadError("%s: %s defines no function %s (functions it defines: %s)"
                            % (spec, path, func, ", ".join(defined) or "none"))
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to read (a builtin): the call will tell
        return _InView(fn, view)
    try:
        signature.bind(None, None)
    except TypeError:
        raise WorkloadError("%s: %s%s cannot be called as %s(device, batch)" % (spec, func, signature, func)) from None
    return _InView(fn, view)


def _check_name(spec, name):
    """name, when it can be a file name's start (letters, digits, . _ + -,
    not starting with a dot); else WorkloadError."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]*", name):
        raise WorkloadError("%s: name %r is not usable in a file name (letters, digits, . _ + -, not first a dot)"
                            % (spec, name))
    return name


def _type_name(v):
    return "None" if v is None else type(v).__name__


def _one_value(spec, loss_fn):
    """loss_fn, checking that it returns one value (a tensor of one
    element, as backward() needs): else WorkloadError, in the warm-up step.
    The check reads the shape only, so the recorder sees no operator."""

    def loss(out, target):
        value = loss_fn(out, target)
        if not isinstance(value, torch.Tensor) or math.prod(value.shape) != 1:
            what = ("a tensor of shape [%s]" % ", ".join(map(str, value.shape)) if isinstance(value, torch.Tensor)
                    else _type_name(value))
            raise WorkloadError("%s: loss_fn returned %s, expected one value (a scalar tensor: reduce it, e.g. "
                                ".mean())" % (spec, what))
        return value

    return loss


def user_workload(spec, fn, device, batch):
    """fn(device, batch) (fn from workload_function(spec)) as a Workload
    named by its name, else by FILE's stem. fn returns a Workload, a tuple
    (model, inputs, target, loss_fn, optimizer[, name]) or a dict with those
    keys: model an nn.Module, inputs a tensor or a tuple / list of the
    model's arguments, loss_fn called as loss_fn(model output, target),
    optimizer a torch.optim.Optimizer over the model's parameters. Raises
    WorkloadError when fn raises or returns something else."""
    try:
        got = fn(device, batch)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's function failed (or exited)
        raise WorkloadError("%s: your function raised %s" % (spec, _user_exception(e, spec))) from None
    stem = re.sub(r"[^A-Za-z0-9_.+-]", "_", os.path.splitext(os.path.basename(spec.rpartition(":")[0]))[0])
    if isinstance(got, Workload):
        w = got
        _check_name(spec, w.name)
        if not isinstance(getattr(w, "config", None), dict):
            raise WorkloadError("%s: the Workload's config is %s, not a dict" % (spec, _type_name(w.config)))
    else:
        if isinstance(got, tuple):
            if len(got) not in (5, 6):
                raise WorkloadError("%s: your function returned a tuple of %d items; %s"
                                    % (spec, len(got), WORKLOAD_EXPECTED))
            fields = dict(zip(WORKLOAD_FIELDS + ("name",), got))
        elif isinstance(got, dict):
            missing = [k for k in WORKLOAD_FIELDS if k not in got]
            unknown = sorted(str(k) for k in got if k not in WORKLOAD_FIELDS + ("name",))
            if missing or unknown:
                what = (["lacks " + ", ".join(missing)] if missing else []) + \
                    (["has unknown keys " + ", ".join(unknown)] if unknown else [])
                raise WorkloadError("%s: your function's dict %s; %s" % (spec, " and ".join(what), WORKLOAD_EXPECTED))
            fields = dict(got)
        else:
            raise WorkloadError("%s: your function returned %s; %s" % (spec, _type_name(got), WORKLOAD_EXPECTED))
        inputs = fields["inputs"]
        checks = (
            ("model", isinstance(fields["model"], nn.Module), "a torch.nn.Module"),
            ("inputs", isinstance(inputs, (torch.Tensor, tuple, list)),
             "a tensor or a tuple / list of the model's arguments (for keyword arguments, return a "
             "models.Workload subclass whose forward_loss calls the model)"),
            ("loss_fn", callable(fields["loss_fn"]), "callable as loss_fn(output, target)"),
            ("optimizer", isinstance(fields["optimizer"], torch.optim.Optimizer), "a torch.optim.Optimizer"),
        )
        for key, ok, want in checks:
            if not ok:
                raise WorkloadError("%s: %s is %s, expected %s" % (spec, key, _type_name(fields[key]), want))
        name = _check_name(spec, fields.get("name", stem))
        trainable = [p for p in fields["model"].parameters() if p.requires_grad]
        updated = {id(p) for group in fields["optimizer"].param_groups for p in group["params"]}
        if trainable and not any(id(p) in updated for p in trainable):
            raise WorkloadError("%s: the optimizer updates none of the model's %d trainable parameters (build it "
                                "from model.parameters())" % (spec, len(trainable)))
        if isinstance(inputs, torch.Tensor):
            inputs = (inputs,)
        config = {"workload": spec}
        if batch is not None:
            config["batch"] = batch
        w = Workload(name, fields["model"], tuple(inputs), fields["target"], _one_value(spec, fields["loss_fn"]),
                     fields["optimizer"], config)
    w.source = spec
    if isinstance(fn, _InView):
        fn.view.bind(w)
    return w


BUILDERS = {
    "resnet50": resnet50,
    "densenet121": densenet121,
    "bert": bert,
    "gpt2": gpt2,
    "unet": unet,
    "lstm": lstm,
    "mobilenet_v2": mobilenet_v2,
    "efficientnet_b0": efficientnet_b0,
    "vgg16": vgg16,
    "vit_b_16": vit_b_16,
    "resnet18": resnet18,
    "shufflenet_v2_x1_0": shufflenet_v2_x1_0,
    "convnext_tiny": convnext_tiny,
    "swin_t": swin_t,
}

# The held-out models: recorded into traces/heldout/, apart from the logs that
# coop's window cost was tuned on, so that a glob over traces/*.ops.jsonl.gz
# never mixes them in (docs/remat.md, "Held-out check").
HELDOUT = ["mobilenet_v2", "efficientnet_b0", "vgg16", "vit_b_16"]
# The second held-out set, in traces/heldout2/ (see resnet18 above).
HELDOUT2 = ["resnet18", "shufflenet_v2_x1_0", "convnext_tiny", "swin_t"]

# What the recorders record when given no names: the six original workloads.
ALL = [n for n in BUILDERS if n not in HELDOUT and n not in HELDOUT2]


def build(name, device="cpu", batch=None):
    """Builds workload `name` (a key of BUILDERS) on `device`; `batch`
    overrides the default batch size."""
    if name not in BUILDERS:
        raise SystemExit("unknown model %r; choose from %s" % (name, ", ".join(BUILDERS)))
    return BUILDERS[name](torch.device(device), batch)


def check_recording(ap, names, out_dir):
    """The recorders' checks before any model is built (minutes each): every
    name in names is a model (else ap.error naming it and the choices), and
    out_dir exists or can be made (else ap.error with the reason)."""
    for name in names:
        if name not in BUILDERS:
            ap.error("unknown model %r (choose from %s)" % (name, ", ".join(BUILDERS)))
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        ap.error("--out-dir %s: %s" % (out_dir, e.strerror or e))


def write_gz(path, data):
    """data gzip-compressed to path, reproducibly (no name, mtime 0), and
    atomically (atomic_file.replacing: a failed or interrupted recording
    leaves the previous file, or none, never a truncated one). Raises
    OSError with the temporary file removed."""
    with atomic_file.replacing(path, compress=True) as f:
        f.write(data)


def batch_size(text):
    """argparse type of the recorders' --batch: a whole number from 1 (the
    builders read a batch of 0 as "the default", and a negative one failed
    deep inside torch)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a whole number" % text) from None
    if value < 1:
        raise argparse.ArgumentTypeError("%d is not a batch size (1 or more)" % value)
    return value


def param_count(model):
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    import time

    for name in sys.argv[1:] or ALL:
        w = build(name)
        t0 = time.time()
        loss = w.step()
        t1 = time.time()
        print(
            "%-12s params %6.1fM  loss %.3f  step %.1f s  %s"
            % (name, param_count(w.model) / 1e6, loss, t1 - t0, w.config),
            flush=True,
        )
