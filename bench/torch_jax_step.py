#!/usr/bin/env python3
"""capstep's training step in PyTorch (eager, optionally torch.compile) and JAX
(jit), on the CPU, timed the way capstep's lane 1 is timed: one step is
forward + backward + AdamW, median over the timed steps after warm-up; and the
same step on an NVIDIA GPU, to compare with capstep's lanes 2 and 3.

The model is capstep's (include/capstep/nn.h, src/nn/causal_lm.cpp), written
out op by op so every framework runs the same arithmetic. --arch seed (the
default), the seed's model: vocab 64, d_model 128, 2 pre-norm blocks, 4 heads
of 32, q/k/v/o [128,128] without biases, causal softmax attention (scale
1/sqrt(32), -1e9 above the diagonal), feed-forward 128->256->128 with
tanh-GELU and no biases, RMSNorm (gain only, eps 1e-5) before attention,
before the MLP and at the end, positions 256x128 (rows 0..T-1), untied head
[128,64]: 311,936 parameters; batch 4 x 16; next-token cross-entropy, mean.
--arch gpt2: LayerNorm (gain and bias, biased variance, eps 1e-5), biases on
q/k/v/o and both feed-forward matrices, learned positions, tanh-GELU, the head
tied to the token embedding (logits = h tok_emb^T): 306,176 parameters at the
seed's size. --arch llama: RMSNorm, no positional table but rotary embeddings
on q and k (rotate-half, rope_theta 10000, tables as transformers computes
them), SwiGLU feed-forward down(silu(h gate) * (h up)) of width d_ff, no
biases, untied head, key/value heads = heads (capstep bench's llama): 344,704
parameters at the seed's size. (capstep writes rotate_half as a product with a
constant signed permutation [Dh, Dh], the same values; the peers slice and
concatenate, as transformers does.) AdamW lr 1e-2, betas 0.9/0.999, eps 1e-8,
weight decay 0.01 on every parameter, biases and gains too (torch.optim.AdamW's
formula, as capstep's). --check-hf-goldens tests/golden/hf checks the gpt2 and
llama model functions against transformers' loss on the repository's golden
files (a Llama with grouped-query attention among them).

Modes:
  --run torch|torch-compile|jax --threads N   one measurement in this process,
      printed as one JSON line (thread settings must be made before the
      framework is imported, so each measurement is its own process);
  --table [--capstep-bin FILE]                runs every CPU measurement as a
      subprocess and prints one table, with ratios to capstep's lane 1.
      FILE is the capstep CLI (run as `capstep bench --arch A --size S`) or
      examples/training_step_on_device (--arch seed only). --rows core keeps
      capstep lane 1, PyTorch eager, torch.compile and JAX jit, each on every
      thread count of --table-threads (default 1,2; any --rows is filtered by it).
scripts/bench-baselines is the usual way in: it makes the venv, builds and
runs capstep, then calls --table.

On the GPU, f32 dots in TF32 everywhere (as capstep's GPU lanes by default),
each step's time is its wall time including the batch's upload and the loss's
read-back:
  --run torch-cuda           eager, torch.optim.AdamW(fused=True);
  --run torch-cuda-compile   torch.compile of the loss function (AOTAutograd
                             compiles its backward), fused AdamW;
  --run torch-cuda-graph     the whole step, optimizer included, captured in
                             one CUDA graph (AdamW(fused=True, capturable=True),
                             static input tensors, warm-up on a side stream);
                             each step copies its batch into the static inputs,
                             replays, reads the loss with .item();
  --run jax-gpu              one jax.jit (value_and_grad + AdamW), parameters
                             and moments donated, on the GPU; float(loss);
  --gpu-table --capstep-json FILE   runs those four as subprocesses (each one
      skips with the reason where CUDA is missing) and prints one table of
      medians in microseconds with ratios to capstep's lanes 3 and 2, read
      from FILE, the output of `training_step_on_device --json` (exit 3 when
      a run did not give a time). scripts/device-check runs it.
  --device cpu runs the GPU modes' code on the CPU (not the CUDA graph), to
      check this script on a machine without a GPU; its times mean nothing.

--size seed|middle|gpt2-small picks the model of the size ladder (capstep's
`bench --size`, nn::LmConfig::preset): seed as above; middle: 8 layers,
d_model 512, 8 heads, d_ff 2048, positions 256, batch 8 x 256; gpt2-small:
12 layers, d_model 768, 12 heads, d_ff 3072, positions 1024, batch 8 x 512;
vocab 64 throughout; gpt2-124m (with --run only): --arch gpt2 at GPT-2 124M's
sizes, vocab 50257, batch 2 x 256. --autocast-bf16 (with --run torch): the
forward under torch.autocast("cpu", torch.bfloat16), PyTorch's mixed precision
(bf16 GEMMs, f32 parameters and AdamW), to compare with capstep's --precision
bf16 (bench/bf16_step.cpp). The GPU runs also report tokens/s and their peak device
memory (torch.cuda.max_memory_allocated, JAX's peak_bytes_in_use).
"""
import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

# (vocab, d_model, layers, heads, d_ff, positions, batch, seq) of each size;
# the same numbers as nn::LmConfig::preset in capstep.
SIZES = {
    "seed": (64, 128, 2, 4, 256, 256, 4, 16),
    "middle": (64, 512, 8, 8, 2048, 256, 8, 256),
    "gpt2-small": (64, 768, 12, 12, 3072, 1024, 8, 512),
    # GPT-2 124M itself (its vocabulary) at batch 2 x 256, for --run only
    # (capstep's bench has no such size: bench/bf16_step.cpp times capstep on it).
    "gpt2-124m": (50257, 768, 12, 12, 3072, 1024, 2, 256),
}
# The architectures of capstep's one model builder (nn::Arch, src/nn/causal_lm.cpp).
ARCHES = ("seed", "gpt2", "llama")
EPS_NORM = 1e-5
LR, BETA1, BETA2, EPS, WD = 1e-2, 0.9, 0.999, 1e-8, 0.01


def set_size(name, arch="seed", kv_heads=0, rope_theta=10000.0, eps_norm=1e-5):
    """The model's dimensions as module globals (every function reads them at
    call time). kv_heads (0: as many as heads) and rope_theta apply to llama;
    capstep bench takes the same --kv-heads (it runs rope_theta 10000)."""
    set_dims(arch, *SIZES[name], kv_heads, rope_theta, eps_norm)


def set_dims(arch, v, d, l, h, f, p, b, t, kv_heads=0, rope_theta=10000.0, eps_norm=1e-5):
    global V, D, L, H, F, P, B, T, DH, N_PARAMS, ARCH, KV, THETA, EPS_NORM
    assert arch in ARCHES, arch
    V, D, L, H, F, P, B, T = v, d, l, h, f, p, b, t
    ARCH, KV, THETA, EPS_NORM = arch, kv_heads or h, float(rope_theta), float(eps_norm)
    assert arch == "llama" or KV == H, "kv_heads applies to llama"
    assert H % KV == 0 and D % H == 0
    DH = D // H
    N_PARAMS = sum(math.prod(shape) for _, shape, _ in param_specs())


def param_specs():
    """(name, shape, kind) in capstep's order (nn::lm_parameters); kind is
    "gain" (ones), "bias" (zeros) or "matrix" (normal 0.02). Every matrix is
    [in, out]. gpt2: LayerNorm gain then bias, each matrix then its bias, no
    head (tied: logits = h tok_emb^T); llama: no positional table, k and v of
    width kv_heads * head width, the SwiGLU matrices gate, up, down."""
    gpt2, llama = ARCH == "gpt2", ARCH == "llama"
    dkv = KV * (D // H)
    ps = []

    def gain(n):
        ps.append((n, (D,), "gain"))
        if gpt2:
            ps.append((n + "_bias", (D,), "bias"))

    def linear(n, bias, i, o):
        ps.append((n, (i, o), "matrix"))
        if gpt2:
            ps.append((bias, (o,), "bias"))

    ps.append(("tok_emb", (V, D), "matrix"))
    if not llama:
        ps.append(("pos_emb", (P, D), "matrix"))
    for l in range(L):
        b = f"blocks.{l}."
        gain(b + "attn_norm")
        linear(b + "attn.wq", b + "attn.bq", D, D)
        linear(b + "attn.wk", b + "attn.bk", D, dkv)
        linear(b + "attn.wv", b + "attn.bv", D, dkv)
        linear(b + "attn.wo", b + "attn.bo", D, D)
        gain(b + "mlp_norm")
        if llama:
            ps += [(b + "mlp.w_gate", (D, F), "matrix"), (b + "mlp.w_up", (D, F), "matrix"),
                   (b + "mlp.w_down", (F, D), "matrix")]
        else:
            linear(b + "mlp.w1", b + "mlp.b1", D, F)
            linear(b + "mlp.w2", b + "mlp.b2", F, D)
    gain("final_norm")
    if not gpt2:
        ps.append(("head", (D, V), "matrix"))
    return ps


set_size("seed")
assert N_PARAMS == 311_936


def init_numpy(seed):
    """normal(0, 0.02) matrices, ones for gains, zeros for biases (capstep's
    scheme; not its bits)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    out = []
    for name, shape, kind in param_specs():
        if kind == "gain":
            a = np.ones(shape, np.float32)
        elif kind == "bias":
            a = np.zeros(shape, np.float32)
        else:
            a = (0.02 * rng.standard_normal(shape)).astype(np.float32)
        out.append(a)
    assert sum(a.size for a in out) == N_PARAMS, sum(a.size for a in out)
    return out


def rope_numpy():
    """llama's rotary tables cos, sin [T, DH] as capstep's rope_tables (and
    transformers' LlamaRotaryEmbedding): inv_freq and the angle in f32, cos and
    sin of the f32 angle in double, rounded to f32."""
    import numpy as np
    half = DH // 2
    inv = np.float32(1.0) / np.power(np.float32(THETA), np.arange(0, DH, 2, dtype=np.float32) / np.float32(DH))
    ang = np.arange(T, dtype=np.float32)[:, None] * np.concatenate([inv, inv])[None, :]
    assert ang.dtype == np.float32 and ang.shape == (T, 2 * half)
    a = ang.astype(np.float64)
    return np.cos(a).astype(np.float32), np.sin(a).astype(np.float32)


def batches_numpy(seed, n):
    """n random (tokens, targets) int32 [B, T] pairs: next-token targets of one stream."""
    import numpy as np
    rng = np.random.default_rng(seed + 1000)
    seqs = rng.integers(0, V, size=(n, B, T + 1), dtype=np.int32)
    return [(s[:, :T].copy(), s[:, 1:].copy()) for s in seqs]


# ---------------------------------------------------------------- PyTorch

def torch_setup(threads, device="cpu"):
    """threads None: the framework's defaults (the GPU runs)."""
    import torch
    import torch.nn.functional as Fn
    if threads is not None:
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass

    def rms(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS_NORM) * g

    mask = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    gpt2, llama = ARCH == "gpt2", ARCH == "llama"
    if llama:
        cos, sin = (torch.from_numpy(a).to(device) for a in rope_numpy())

    def loss_fn(ps, tokens, targets):
        # capstep's body_of (src/nn/causal_lm.cpp), one switch per architecture
        it = iter(ps)

        def norm(x):
            g = next(it)
            return Fn.layer_norm(x, (D,), g, next(it), EPS_NORM) if gpt2 else rms(x, g)

        def linear():  # a matrix [in, out] and (gpt2) its bias
            w = next(it)
            return (w, next(it)) if gpt2 else (w, None)

        def apply(x, f):
            return x @ f[0] + f[1] if gpt2 else x @ f[0]

        def rope(t):  # x cos + rotate_half(x) sin, rotate_half(x) = [-x2, x1]
            return t * cos + torch.cat((-t[..., DH // 2:], t[..., :DH // 2]), -1) * sin

        tok = next(it)
        x = Fn.embedding(tokens, tok)
        if not llama:
            x = x + next(it)[:T]
        heads = lambda t, n: t.view(B, T, n, DH).transpose(1, 2)
        # query head h reads key/value head h // (H / KV)
        repeat_kv = (lambda t: t) if KV == H else (lambda t: t.repeat_interleave(H // KV, dim=1))
        for _ in range(L):
            h = norm(x)
            fq, fk, fv, fo = linear(), linear(), linear(), linear()
            q, k, v = heads(apply(h, fq), H), heads(apply(h, fk), KV), heads(apply(h, fv), KV)
            if llama:
                q, k = rope(q), rope(k)
            k, v = repeat_kv(k), repeat_kv(v)
            s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(DH))
            s = torch.where(mask, s, torch.full_like(s, -1e9))
            att = torch.softmax(s, -1) @ v
            x = x + apply(att.transpose(1, 2).reshape(B, T, D), fo)
            h = norm(x)
            if llama:
                wg, wu, wd = next(it), next(it), next(it)
                x = x + (Fn.silu(h @ wg) * (h @ wu)) @ wd
            else:
                f1, f2 = linear(), linear()
                x = x + apply(Fn.gelu(apply(h, f1), approximate="tanh"), f2)
        hf = norm(x)
        logits = hf @ tok.t() if gpt2 else hf @ next(it)
        return Fn.cross_entropy(logits.reshape(B * T, V), targets.reshape(B * T).long())

    return torch, loss_fn


def run_torch(args, compiled):
    torch, loss_fn = torch_setup(args.threads)
    params = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in init_numpy(args.seed)]
    opt_kw = dict(lr=LR, betas=(BETA1, BETA2), eps=EPS, weight_decay=WD)
    if args.fused:
        opt_kw["fused"] = True
    opt = torch.optim.AdamW(params, **opt_kw)
    data = [(torch.from_numpy(a), torch.from_numpy(b)) for a, b in batches_numpy(args.seed, args.warmup + args.steps)]
    fwd = loss_fn
    opt_step = opt.step
    compile_s = None
    if compiled:
        import torch._inductor.config as ic
        ic.compile_threads = 1  # the machine has 2 cores; keep compile from competing with others
        fwd = torch.compile(loss_fn)
        opt_step = torch.compile(opt.step)

    def step(tokens, targets):
        opt.zero_grad(set_to_none=True)
        if args.autocast_bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = fwd(params, tokens, targets)
        else:
            loss = fwd(params, tokens, targets)
        loss.backward()
        opt_step()
        return loss.item()

    t0 = time.perf_counter()
    losses = [step(*data[0])]
    if compiled:
        compile_s = time.perf_counter() - t0
    return measure(args, step, data, losses, info={
        "framework": "torch", "version": torch.__version__, "compiled": compiled, "compile_s": compile_s,
        "torch_threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
        "adamw": "fused" if args.fused else "default (for-loop on CPU)",
        "autocast": "bf16" if args.autocast_bf16 else None,
        "parallel_info": torch.__config__.parallel_info().splitlines()[:4],
    })


def run_torch_gpu(args, mode):
    """mode: "eager", "compile" or "graph" (see the module's docstring)."""
    import torch
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        return {"skipped": f"torch {torch.__version__} (CUDA {torch.version.cuda}): torch.cuda.is_available() "
                           "is False"}
    if mode == "graph" and dev != "cuda":
        return {"skipped": "a CUDA graph needs --device cuda"}
    # TF32 for f32 dots, as capstep's GPU lanes by default (one API only: torch
    # refuses a mix of allow_tf32 and fp32_precision).
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    _, loss_fn = torch_setup(None, device=dev)
    on_gpu = dev == "cuda"
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    params = [torch.nn.Parameter(torch.from_numpy(a.copy()).to(dev)) for a in init_numpy(args.seed)]
    opt_kw = dict(lr=LR, betas=(BETA1, BETA2), eps=EPS, weight_decay=WD, fused=True)
    if mode == "graph":
        opt_kw["capturable"] = True
    opt = torch.optim.AdamW(params, **opt_kw)
    # The batches stay on the host (pinned, as PyTorch's fastest recipe has
    # them); every step sends its own up.
    data = [(torch.from_numpy(a), torch.from_numpy(b)) for a, b in batches_numpy(args.seed, args.warmup + args.steps)]
    if on_gpu:
        data = [(a.pin_memory(), b.pin_memory()) for a, b in data]
    losses = []
    compile_s = None
    t0 = time.perf_counter()
    if mode == "graph":
        # PyTorch's whole-network capture recipe (CUDA semantics, "CUDA
        # Graphs"): a few eager steps on a side stream (they create AdamW's
        # state and run on the real batches, so they count as steps), then
        # capture one whole step with the gradients set to None, so that the
        # captured backward writes them afresh on every replay.
        static_tok = torch.zeros((B, T), dtype=torch.int32, device=dev)
        static_tgt = torch.zeros((B, T), dtype=torch.int32, device=dev)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for k in range(min(3, args.warmup)):
                static_tok.copy_(data[k][0], non_blocking=True)
                static_tgt.copy_(data[k][1], non_blocking=True)
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(params, static_tok, static_tgt)
                loss.backward()
                opt.step()
                losses.append(loss.item())
        torch.cuda.current_stream().wait_stream(side)
        sync()
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = loss_fn(params, static_tok, static_tgt)
            static_loss.backward()
            opt.step()
        sync()
        compile_s = time.perf_counter() - t0

        def step(tokens, targets):
            static_tok.copy_(tokens, non_blocking=True)
            static_tgt.copy_(targets, non_blocking=True)
            graph.replay()
            return static_loss.item()  # waits for the replay: the whole step
    else:
        fwd = torch.compile(loss_fn) if mode == "compile" else loss_fn

        def step(tokens, targets):
            tok, tgt = tokens.to(dev, non_blocking=True), targets.to(dev, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            loss = fwd(params, tok, tgt)
            loss.backward()
            opt.step()
            return loss.item()  # waits for the stream, optimizer included

        losses.append(step(*data[0]))
        sync()
        if mode == "compile":
            compile_s = time.perf_counter() - t0
    info = {
        "framework": "torch", "version": torch.__version__, "cuda": torch.version.cuda, "device": dev,
        "gpu": torch.cuda.get_device_name(0) if on_gpu else None, "mode": mode,
        "compiled": mode == "compile", "compile_s": compile_s, "adamw": "fused" + (", capturable" if mode == "graph" else ""),
        "tf32": torch.backends.cuda.matmul.allow_tf32, "threads": None if on_gpu else torch.get_num_threads(),
    }
    r = measure(args, step, data, losses, info=info)
    sync()
    if on_gpu:
        r["peak_bytes"] = int(torch.cuda.max_memory_allocated())
    return r


# ---------------------------------------------------------------- JAX

def jax_loss_fn():
    """capstep's body_of (src/nn/causal_lm.cpp) in jax.numpy, one switch per architecture."""
    import jax
    import jax.numpy as jnp

    def rms(x, g):
        return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + EPS_NORM) * g

    def layer_norm(x, g, b):  # torch.nn.LayerNorm's: the biased variance
        xc = x - jnp.mean(x, -1, keepdims=True)
        return xc * jax.lax.rsqrt(jnp.mean(xc * xc, -1, keepdims=True) + EPS_NORM) * g + b

    mask = jnp.tril(jnp.ones((T, T), bool))
    gpt2, llama = ARCH == "gpt2", ARCH == "llama"
    if llama:
        cos, sin = (jnp.asarray(a) for a in rope_numpy())

    def loss_fn(ps, tokens, targets):
        it = iter(ps)

        def norm(x):
            g = next(it)
            return layer_norm(x, g, next(it)) if gpt2 else rms(x, g)

        def linear():  # a matrix [in, out] and (gpt2) its bias
            w = next(it)
            return (w, next(it)) if gpt2 else (w, None)

        def apply(x, f):
            return x @ f[0] + f[1] if gpt2 else x @ f[0]

        def rope(t):  # x cos + rotate_half(x) sin, rotate_half(x) = [-x2, x1]
            return t * cos + jnp.concatenate([-t[..., DH // 2:], t[..., :DH // 2]], -1) * sin

        tok = next(it)
        x = tok[tokens]
        if not llama:
            x = x + next(it)[:T]
        heads = lambda t, n: t.reshape(B, T, n, DH).transpose(0, 2, 1, 3)
        # query head h reads key/value head h // (H / KV)
        repeat_kv = (lambda t: t) if KV == H else (lambda t: jnp.repeat(t, H // KV, axis=1))
        for _ in range(L):
            h = norm(x)
            fq, fk, fv, fo = linear(), linear(), linear(), linear()
            q, k, v = heads(apply(h, fq), H), heads(apply(h, fk), KV), heads(apply(h, fv), KV)
            if llama:
                q, k = rope(q), rope(k)
            k, v = repeat_kv(k), repeat_kv(v)
            s = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(DH))
            s = jnp.where(mask, s, -1e9)
            att = jax.nn.softmax(s, -1) @ v
            x = x + apply(att.transpose(0, 2, 1, 3).reshape(B, T, D), fo)
            h = norm(x)
            if llama:
                wg, wu, wd = next(it), next(it), next(it)
                x = x + (jax.nn.silu(h @ wg) * (h @ wu)) @ wd
            else:
                f1, f2 = linear(), linear()
                x = x + apply(jax.nn.gelu(apply(h, f1), approximate=True), f2)
        hf = norm(x)
        logits = hf @ tok.T if gpt2 else hf @ next(it)
        logp = jax.nn.log_softmax(logits, -1)
        return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], -1))

    return loss_fn


def run_jax(args, gpu=False):
    import jax
    import jax.numpy as jnp
    platform = "cuda" if gpu and args.device == "cuda" else "cpu"
    jax.config.update("jax_platforms", platform)
    if gpu:
        # TF32 for f32 dots, as capstep's GPU lanes and the PyTorch runs
        # ("default" is TF32 on the GPU too, should a JAX not know the name).
        try:
            jax.config.update("jax_default_matmul_precision", "tensorfloat32")
        except ValueError:
            jax.config.update("jax_default_matmul_precision", "default")
        try:
            jax.devices()
        except Exception as e:  # RuntimeError, or an AssertionError where no backend loaded at all
            why = (str(e).splitlines() or [""])[0][:200]
            return {"skipped": f"jax {jax.__version__}: no {platform} backend ({type(e).__name__}: {why}); "
                               "is jax-cuda12/13-plugin installed and a GPU present?"}

    loss_fn = jax_loss_fn()

    def train_step(ps, ms, vs, t, tokens, targets):
        # torch.optim.AdamW, written out: decay first, then the bias-corrected step.
        loss, gs = jax.value_and_grad(loss_fn)(ps, tokens, targets)
        bc1 = 1.0 - BETA1 ** t
        bc2 = 1.0 - BETA2 ** t
        new_p, new_m, new_v = [], [], []
        for p, g, m, v in zip(ps, gs, ms, vs):
            m = BETA1 * m + (1 - BETA1) * g
            v = BETA2 * v + (1 - BETA2) * g * g
            p = p * (1 - LR * WD) - (LR / bc1) * m / (jnp.sqrt(v) / jnp.sqrt(bc2) + EPS)
            new_p.append(p), new_m.append(m), new_v.append(v)
        return loss, new_p, new_m, new_v

    step_jit = jax.jit(train_step, donate_argnums=(0, 1, 2))
    ps = [jnp.asarray(a) for a in init_numpy(args.seed)]
    state = {"p": ps, "m": [jnp.zeros_like(a) for a in ps], "v": [jnp.zeros_like(a) for a in ps], "t": 0}
    data = batches_numpy(args.seed, args.warmup + args.steps)
    if not gpu:
        data = [(jnp.asarray(a), jnp.asarray(b)) for a, b in data]
    # On the GPU the batches stay numpy arrays on the host: each call of the
    # jitted step sends its batch up, as capstep's lanes do.

    def step(tokens, targets):
        state["t"] += 1
        loss, state["p"], state["m"], state["v"] = step_jit(
            state["p"], state["m"], state["v"], jnp.float32(state["t"]), tokens, targets)
        return float(loss)  # waits for the step: the whole executable's outputs become ready together

    t0 = time.perf_counter()
    losses = [step(*data[0])]
    compile_s = time.perf_counter() - t0
    import jaxlib
    info = {
        "framework": "jax", "version": jax.__version__, "jaxlib": jaxlib.__version__,
        "compile_s": compile_s, "devices": [str(d) for d in jax.devices()],
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }
    if gpu:
        info.update(device=platform, gpu=jax.devices()[0].device_kind,
                    matmul_precision=str(jax.config.jax_default_matmul_precision))
    r = measure(args, step, data, losses, info=info)
    stats = jax.devices()[0].memory_stats() if gpu else None
    if stats and "peak_bytes_in_use" in stats:
        r["peak_bytes"] = int(stats["peak_bytes_in_use"])
    return r


# ---------------------------------------------------------------- check against transformers

def read_safetensors(path):
    """{name: numpy array} of a .safetensors file (F32, F64, I32, I64 only)."""
    import numpy as np
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    kinds = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], kinds[e["dtype"]]).reshape(e["shape"]).copy()
    return out


def hf_params(arch, w):
    """transformers' weights (save_pretrained's names) in capstep's order and layout."""
    import numpy as np
    ps = []
    for name, shape, _ in param_specs():
        if arch == "gpt2":
            t = lambda k: w.get("transformer." + k, w.get(k))
            if name in ("tok_emb", "pos_emb"):
                a = t({"tok_emb": "wte", "pos_emb": "wpe"}[name] + ".weight")
            elif name.startswith("final_norm"):
                a = t("ln_f." + ("bias" if name.endswith("_bias") else "weight"))
            else:
                l, rest = name.split(".", 2)[1:]
                b = f"h.{l}."
                norm = {"attn_norm": "ln_1", "attn_norm_bias": "ln_1", "mlp_norm": "ln_2", "mlp_norm_bias": "ln_2"}
                if rest in norm:
                    a = t(b + norm[rest] + (".bias" if rest.endswith("_bias") else ".weight"))
                elif rest[5:] in ("wq", "wk", "wv", "bq", "bk", "bv"):  # c_attn: [D, 3D] = q | k | v
                    i = "qkv".index(rest[-1])
                    full = t(b + "attn.c_attn." + ("weight" if rest[5] == "w" else "bias"))
                    a = full[..., i * D:(i + 1) * D]
                else:
                    hf = {"attn.wo": "attn.c_proj.weight", "attn.bo": "attn.c_proj.bias",
                          "mlp.w1": "mlp.c_fc.weight", "mlp.b1": "mlp.c_fc.bias",
                          "mlp.w2": "mlp.c_proj.weight", "mlp.b2": "mlp.c_proj.bias"}[rest]
                    a = t(b + hf)  # Conv1D: stored [in, out] already
        else:
            if name == "tok_emb":
                a = w["model.embed_tokens.weight"]
            elif name == "final_norm":
                a = w["model.norm.weight"]
            elif name == "head":
                a = w["lm_head.weight"].T
            else:
                l, rest = name.split(".", 2)[1:]
                b = f"model.layers.{l}."
                hf = {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm",
                      "attn.wq": "self_attn.q_proj", "attn.wk": "self_attn.k_proj", "attn.wv": "self_attn.v_proj",
                      "attn.wo": "self_attn.o_proj", "mlp.w_gate": "mlp.gate_proj", "mlp.w_up": "mlp.up_proj",
                      "mlp.w_down": "mlp.down_proj"}[rest]
                a = w[b + hf + ".weight"]
                if a.ndim == 2:
                    a = a.T  # nn.Linear: [out, in]
        a = np.ascontiguousarray(a, np.float32)
        assert a.shape == tuple(shape), (name, a.shape, shape)
        ps.append(a)
    return ps


def check_hf_goldens(root):
    """The peers' model functions against transformers' own loss on the
    repository's golden files (scripts/make-hf-goldens: a GPT-2 and a Llama
    with grouped-query attention, random weights of std 0.1, a batch of 2 x
    16), the files capstep's tests match within 1e-6. Exit 1 above 1e-5."""
    import numpy as np
    worst = 0.0
    for arch in ("gpt2", "llama"):
        d = os.path.join(root, arch)
        cfg = json.load(open(os.path.join(d, "config.json")))
        w = read_safetensors(os.path.join(d, "model.safetensors"))
        g = read_safetensors(os.path.join(d, "golden.safetensors"))
        b, t = g["tokens"].shape
        if arch == "gpt2":
            set_dims("gpt2", cfg["vocab_size"], cfg["n_embd"], cfg["n_layer"], cfg["n_head"],
                     cfg.get("n_inner") or 4 * cfg["n_embd"], cfg["n_positions"], b, t,
                     eps_norm=cfg["layer_norm_epsilon"])
        else:
            set_dims("llama", cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"],
                     cfg["num_attention_heads"], cfg["intermediate_size"], cfg["max_position_embeddings"], b, t,
                     kv_heads=cfg.get("num_key_value_heads") or 0, rope_theta=(cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0)),
                     eps_norm=cfg["rms_norm_eps"])
        ps = hf_params(arch, w)
        want = float(np.asarray(g["loss"]).reshape(()))
        torch, tloss = torch_setup(None)
        got_t = float(tloss([torch.from_numpy(a) for a in ps], torch.from_numpy(g["tokens"].astype(np.int64)),
                            torch.from_numpy(g["targets"].astype(np.int64))))
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_platforms", "cpu")
        got_j = float(jax.jit(jax_loss_fn())([jnp.asarray(a) for a in ps], jnp.asarray(g["tokens"], jnp.int32),
                                               jnp.asarray(g["targets"], jnp.int32)))
        for who, got in (("PyTorch", got_t), ("JAX", got_j)):
            rel = abs(got - want) / abs(want)
            worst = max(worst, rel)
            print(f"{arch} ({N_PARAMS:,} parameters, kv heads {KV} of {H}, eps {EPS_NORM:g}"
                  f"{f', rope_theta {THETA:g}' if arch == 'llama' else ''}): {who} loss {got:.7f}, "
                  f"transformers {want:.7f}, relative {rel:.1e}")
    return 0 if worst <= 1e-5 else 1


# ---------------------------------------------------------------- timing

def measure(args, step, data, losses, info):
    """The first len(losses) steps (compile, if any) already ran on data[0...];
    the rest of the warm-up, then the timed steps."""
    for k in range(len(losses), args.warmup):
        losses.append(step(*data[k]))
    wall, cpu = [], []
    for k in range(args.warmup, args.warmup + args.steps):
        c0, t0 = time.process_time(), time.perf_counter()
        losses.append(step(*data[k]))
        t1, c1 = time.perf_counter(), time.process_time()
        wall.append((t1 - t0) * 1e3)
        cpu.append((c1 - c0) * 1e3)
    info.update({
        "threads": info.get("threads", args.threads), "affinity": sorted(os.sched_getaffinity(0)),
        "warmup": args.warmup, "steps": args.steps,
        "median_ms": statistics.median(wall), "min_ms": min(wall), "max_ms": max(wall),
        "p90_ms": sorted(wall)[int(0.9 * (len(wall) - 1))],
        # process CPU time / wall time: how many cores the step really kept busy
        "cpu_per_wall": statistics.median(cpu) / statistics.median(wall),
        "cpu_ms": statistics.median(cpu),
        "losses": losses,
        "size": SIZE_NAME, "tokens_per_step": B * T,
        "tokens_per_s": B * T / (statistics.median(wall) / 1e3),
    })
    return info


# ---------------------------------------------------------------- the table

def thread_env(threads):
    env = dict(os.environ)
    n = str(threads)
    env.update(OMP_NUM_THREADS=n, MKL_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n)
    if threads == 1:
        # XLA's CPU runtime has no thread-count setting: this one keeps its dots
        # on the calling thread; "cores busy" in the table shows what it used.
        # (--pin-cpu is the hard limit, at the cost of sharing that core with
        # whatever else runs there.)
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
    return env


PIN_CPU = None  # set from --pin-cpu
SIZE_NAME = "seed"  # set from --size


def pin_prefix(threads, cpu=None):
    return ["taskset", "-c", str(PIN_CPU)] if threads == 1 and PIN_CPU is not None else []


def run_one(kind, threads, args, fused=False, extra_env=None):
    cmd = pin_prefix(threads) + [sys.executable, os.path.abspath(__file__), "--run", kind,
                                           "--threads", str(threads), "--warmup", str(args.warmup),
                                           "--steps", str(args.steps), "--seed", str(args.seed),
                                           "--size", args.size, "--arch", args.arch, "--kv-heads", str(args.kv_heads)]
    if fused:
        cmd.append("--fused")
    try:
        env = thread_env(threads)
        env.update(extra_env or {})
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"skipped": f"did not finish in {args.timeout} s"}
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return {"skipped": f"exit {p.returncode}: {tail[:200]}"}
    return json.loads(lines[-1])


OPENBLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def openblas_core(unset):
    """The kernel set the system OpenBLAS (capstep's) picks, with or without the overrides."""
    env = {k: v for k, v in os.environ.items() if not (unset and k in OPENBLAS_ENV)}
    code = ("import ctypes; b = ctypes.CDLL('libopenblas.so.0'); b.openblas_get_corename.restype = ctypes.c_char_p; "
            "print(b.openblas_get_corename().decode())")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return p.stdout.strip() or "unknown"


def capstep_command(args):
    """The command before the lanes' options: the `capstep` CLI's `bench
    --arch A`, or examples/training_step_on_device (the seed's architecture only)."""
    if os.path.basename(args.capstep_bin).startswith("capstep"):
        return [args.capstep_bin, "bench", "--arch", ARCH] + (["--kv-heads", str(KV)] if KV != H else [])
    if ARCH != "seed":
        raise SystemExit(f"--arch {ARCH}: --capstep-bin must be the capstep CLI (capstep bench --arch), "
                         f"not {args.capstep_bin}")
    return [args.capstep_bin]


def run_capstep(args, unset_openblas, lane_tag="1", threads=1):
    """capstep lane 1 (or lane_tag's lane alone, e.g. "1f") on `threads`
    host threads (CAPSTEP_HOST_THREADS; pinned like the 1-thread runs, when
    --pin-cpu is given).

    Its JSON gives wall time per step and the process's CPU time (all threads)
    over the timed steps, per step (cpu_ms_per_step). The difference of two
    whole runs' CPU times, used before, mixed in the start-up's system time,
    which varies by tenths of a second from run to run."""
    env = {k: v for k, v in os.environ.items() if not (unset_openblas and k in OPENBLAS_ENV)}
    env["CAPSTEP_HOST_THREADS"] = str(threads)
    cmd = pin_prefix(threads) + capstep_command(args) + [
        "--json", "--only", lane_tag, "--warmup", str(args.warmup), "--steps", str(args.steps), "--size", args.size]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
        if p.returncode != 0:
            raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-200:]}")
        j = json.loads(p.stdout)
        # the same model as the peers: its size, and its parameter count (which
        # tells the architectures apart) from the model line
        words = j["model"].replace(",", "").split()
        n = int(words[words.index("parameters;") - 1]) if "parameters;" in words else None
        if j.get("size", "seed") != args.size or n != N_PARAMS:
            raise RuntimeError(f"capstep ran another model than the peers' {ARCH} of size {args.size} "
                               f"({N_PARAMS} parameters): {j['model']!r}, size {j.get('size')}")
    except subprocess.TimeoutExpired:
        return {"skipped": f"did not finish in {args.timeout} s"}
    except RuntimeError as e:
        return {"skipped": str(e)}
    lane = next(l for l in j["lanes"] if l["label"].startswith(f"[{lane_tag}]"))
    wall = lane["step_ms"]
    cpu_step = lane.get("cpu_ms_per_step")
    return {"median_ms": lane["median_ms"], "min_ms": min(wall), "max_ms": max(wall),
            "p90_ms": sorted(wall)[int(0.9 * (len(wall) - 1))], "losses": lane["losses"],
            "cpu_ms": cpu_step, "cpu_per_wall": cpu_step / statistics.mean(wall) if cpu_step else None,
            "threads": threads, "model": j["model"], "steps": j["steps"], "warmup": j["warmup"],
            "openblas_core": openblas_core(unset_openblas), "round_trip_ns": j.get("host_round_trip_ns")}


def load1():
    return os.getloadavg()[0]


def table(args):
    # (label, threads column, how to measure)
    plan = []
    one = "1, pinned" if PIN_CPU is not None else "1"
    want = {int(n) for n in args.table_threads.split(",")}
    passive = {"OMP_WAIT_POLICY": "PASSIVE"}
    if args.rows == "all":
        if args.capstep_bin:
            plan.append(("capstep lane 1 (interpreter)", one, lambda: run_capstep(args, False)))
            plan.append(("capstep lane 1 (interpreter)", "2", lambda: run_capstep(args, False, "1", 2)))
            plan.append(("capstep lane 1, OPENBLAS_CORETYPE/L2_SIZE unset", one,
                         lambda: run_capstep(args, True)))
            plan.append(("capstep lane 1f (AdamW in the program)", one,
                         lambda: run_capstep(args, False, "1f")))
            plan.append(("capstep lane 1f (AdamW in the program)", "2", lambda: run_capstep(args, False, "1f", 2)))
        # libgomp's default wait policy spins; with 2 threads on 2 shared cores a
        # step sometimes stalls for most of a second, so the passive policy is a row too.
        runs = [("PyTorch eager", "torch", 1, False, None), ("PyTorch eager", "torch", 2, False, None),
                ("PyTorch eager, OMP_WAIT_POLICY=PASSIVE", "torch", 2, False, passive),
                ("PyTorch eager, AdamW(fused=True)", "torch", 1, True, None)]
        if not args.no_compile:
            runs.append(("PyTorch torch.compile (inductor, optimizer too)", "torch-compile", 1, False, None))
        runs += [("JAX jit", "jax", 1, False, None), ("JAX jit", "jax", 2, False, None)]
    else:
        # --rows core: capstep's lane 1 and each framework's usual step, on
        # every thread count of --table-threads
        for n in sorted(want):
            if args.capstep_bin:
                plan.append(("capstep lane 1 (interpreter)", one if n == 1 else str(n),
                             lambda n=n: run_capstep(args, False, "1", n)))
        runs = []
        for n in sorted(want):
            runs.append(("PyTorch eager", "torch", n, False, None))
            if not args.no_compile:
                runs.append(("PyTorch torch.compile (inductor, optimizer too)", "torch-compile", n, False, None))
            runs.append(("JAX jit", "jax", n, False, None))
    for label, kind, n, fused, env in runs:
        plan.append((label, f"{n}, pinned" if n == 1 and PIN_CPU is not None else f"{n}",
                     lambda kind=kind, n=n, fused=fused, env=env: run_one(kind, n, args, fused, env)))
    plan = [row for row in plan if int(row[1].split(",")[0]) in want]

    # Rounds interleave the runs, so a burst of load from elsewhere hits one
    # round of everything rather than every round of one run.
    results = [[] for _ in plan]
    loads = [load1()]
    for rnd in range(args.rounds):
        for i, (label, threads, fn) in enumerate(plan):
            print(f"  round {rnd + 1}/{args.rounds}: {label}, {threads} (load {load1():.2f})",
                  file=sys.stderr, flush=True)
            results[i].append(fn())
            loads.append(load1())

    def summary(rs):
        ok = [r for r in rs if "median_ms" in r]
        if not ok:
            return None, rs[0].get("skipped", "no result")
        meds = sorted(r["median_ms"] for r in ok)
        cpus = [r["cpu_ms"] for r in ok if r.get("cpu_ms") is not None]
        return {"median_ms": statistics.median(meds), "round_min": meds[0], "round_max": meds[-1],
                "cpu_ms": statistics.median(cpus) if cpus else None,
                "first": ok[0], "n": len(ok)}, None

    sums = [summary(rs) for rs in results]
    # each run is compared with capstep's lane 1 on as many threads
    cap_by_threads = {}
    if args.capstep_bin:
        for (label, threads, _), (sm, _) in zip(plan, sums):
            if label == "capstep lane 1 (interpreter)" and sm:
                cap_by_threads[threads.split(",")[0]] = sm
    out = [f"model: --arch {ARCH} --size {args.size} ({N_PARAMS:,} parameters, batch {B} x {T}"
           f"{', key/value heads %d of %d, rope_theta %g' % (KV, H, THETA) if ARCH == 'llama' else ''})",
           f"ms per step (forward + backward + AdamW): median over {args.rounds} interleaved rounds of each "
           f"run's median of {args.steps} timed steps (after {args.warmup} warm-up)",
           "", f"| {'run':<48} | {'threads':<9} | {'wall ms':>8} | {'rounds min-max':>15} | {'CPU ms':>7} | "
               f"{'wall vs capstep':>15} | {'CPU vs capstep':>14} |",
           f"|{'-' * 50}|{'-' * 11}|{'-' * 10}|{'-' * 17}|{'-' * 9}|{'-' * 17}|{'-' * 16}|"]
    for (label, threads, _), (sm, why) in zip(plan, sums):
        if sm is None:
            out.append(f"| {label:<48} | {threads:<9} | {'skipped':>8} | {'':>15} | {'':>7} | {'':>15} | {'':>14} |")
            out.append(f"|   skipped: {why}")
            continue
        spread = f"{sm['round_min']:.2f}-{sm['round_max']:.2f}"
        cpu = f"{sm['cpu_ms']:.2f}" if sm["cpu_ms"] is not None else "-"
        cap = cap_by_threads.get(threads.split(",")[0])
        ratio = f"{sm['median_ms'] / cap['median_ms']:.2f}x" if cap else "-"
        cratio = (f"{sm['cpu_ms'] / cap['cpu_ms']:.2f}x"
                  if cap and cap["cpu_ms"] and sm["cpu_ms"] is not None else "-")
        out.append(f"| {label:<48} | {threads:<9} | {sm['median_ms']:>8.3f} | {spread:>15} | {cpu:>7} | "
                   f"{ratio:>15} | {cratio:>14} |")
    out += ["",
            "wall ms: median wall time of a step. CPU ms: the process's CPU time per step, all its threads "
            "(Python: median of per-step process_time; capstep: the process's CPU time over its timed steps, "
            "per step, from its JSON). On a loaded machine CPU ms is the steadier figure for 1-thread runs; "
            "for 2-thread runs it counts both threads' work (spinning included).",
            "vs capstep: over the figure of capstep lane 1 on as many threads (above 1 = slower than capstep).",
            ("1-thread runs pinned to CPU %d (taskset)" % PIN_CPU if PIN_CPU is not None else
             "no run is pinned") + "; 2-thread runs may use both cores.",
            "threads N: torch.set_num_threads(N) and set_num_interop_threads(1); OMP/MKL/OPENBLAS_NUM_THREADS=N; "
            "JAX 1: XLA_FLAGS=--xla_cpu_multi_thread_eigen=false, JAX 2: XLA's defaults (its pool = the 2 CPUs); "
            "capstep N: CAPSTEP_HOST_THREADS=N (its GEMMs, fused groups and AdamW cut into parts; OpenBLAS "
            "itself on 1 thread).",
            f"1-minute load average: {min(loads):.2f} to {max(loads):.2f} during the measurement."]

    firsts = [(label, threads, sm["first"]) for (label, threads, _), (sm, _) in zip(plan, sums) if sm]
    ref_t, ref = next(((t, r) for l, t, r in firsts if r.get("framework") == "torch" and not r.get("compiled")),
                      (None, None))
    if ref:
        for label, threads, r in firsts:
            if r is not ref and "framework" in r:
                d = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], ref["losses"]))
                out.append(f"losses, {label} ({threads}) vs PyTorch eager ({ref_t}): at most {d:.1e} relative "
                           f"over {len(r['losses'])} steps")
        lo = ref["losses"]
        out.append(f"PyTorch eager losses: {lo[0]:.4f} (step 1) -> {lo[-1]:.4f} (step {len(lo)}) on random "
                   f"tokens; ln(64) = {math.log(64):.4f}")
    caps = [r for _, _, r in firsts if "openblas_core" in r]
    for label, threads, r in firsts:
        if "openblas_core" in r:
            d = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], caps[0]["losses"]))
            out.append(f"{label}: OpenBLAS core {r['openblas_core']}, losses {r['losses'][0]:.4f} -> "
                       f"{r['losses'][-1]:.4f} (capstep's corpus and init), at most {d:.1e} from the first capstep row")
    # Where the VM's two CPUs were for each 2-thread capstep round: a cache
    # line's round trip between its threads (about 30 ns: one core's two
    # hyperthreads; 60-110: two cores sharing a cache; about 450: two dies).
    for (label, threads, _), rs in zip(plan, results):
        trips = [(r["median_ms"], r["round_trip_ns"]) for r in rs if r.get("round_trip_ns")]
        if trips and "openblas_core" in rs[0]:
            out.append(f"{label} ({threads}), each round's median and its threads' cache-line round trip: " +
                       ", ".join(f"{ms:.3f} ms / {ns:.0f} ns" for ms, ns in trips))
    versions = {}
    for label, threads, r in firsts:
        if "version" in r:
            versions[r["framework"]] = r["version"] + (f" (jaxlib {r['jaxlib']})" if "jaxlib" in r else "")
        if r.get("compile_s") is not None and threads.startswith("1"):
            out.append(f"first step incl. tracing+compile, {label}: {r['compile_s']:.1f} s")
    out.append("versions: python " + platform.python_version() + ", " +
               ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))
    print("\n".join(out))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump([{"label": l, "threads": t, "rounds": rs} for (l, t, _), rs in zip(plan, results)], f, indent=1)


# ---------------------------------------------------------------- the GPU table

GPU_RUNS = [  # (kind, label), fastest recipe first: each runs as its own process
    ("torch-cuda-graph", "PyTorch, whole step in one CUDA graph (capturable fused AdamW)"),
    ("jax-gpu", "JAX jit + donate_argnums (XLA on the GPU)"),
    ("torch-cuda-compile", "PyTorch torch.compile (inductor) + fused AdamW"),
    ("torch-cuda", "PyTorch eager + fused AdamW"),
]


def run_gpu_one(kind, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--run", kind, "--device", args.device,
           "--warmup", str(args.warmup), "--steps", str(args.steps), "--seed", str(args.seed),
           "--size", args.size, "--arch", args.arch, "--kv-heads", str(args.kv_heads)]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"skipped": f"did not finish in {args.timeout} s"}
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return {"skipped": f"exit {p.returncode}: {tail[:300]}"}
    r = json.loads(lines[-1])
    r["process_s"] = time.perf_counter() - t0
    return r


def capstep_lanes(path):
    """capstep's lanes 2 and 3 from `training_step_on_device --json`: {"2": lane, "3": lane}, and the report."""
    with open(path) as f:
        j = json.load(f)
    lanes = {}
    for i, lane in enumerate(j.get("lanes", [])):
        label = lane.get("label", "")
        key = label[1:label.index("]")] if label.startswith("[") and "]" in label else str(i + 1)
        lanes[key] = lane
    return lanes, j


def gpu_table(args):
    cap, capj = {}, {}
    if args.capstep_json:
        try:
            cap, capj = capstep_lanes(args.capstep_json)
        except (OSError, ValueError) as e:
            print(f"capstep JSON {args.capstep_json}: {e}", file=sys.stderr)
    rows = []  # (label, median us or None, why, result)
    for key in ("3", "2"):
        lane = cap.get(key)
        if lane is None:
            rows.append((f"capstep [{key}]", None, "no capstep JSON" if not capj else "lane not in the JSON", {}))
        elif not lane.get("ran"):
            rows.append((f"capstep {lane['label']}", None, lane.get("skipped", "not run"), lane))
        else:
            rows.append((f"capstep {lane['label']}", 1e3 * lane["median_ms"], None, lane))
    for kind, label in GPU_RUNS:
        if args.runs and kind not in args.runs.split(","):
            continue
        print(f"  {kind} ...", file=sys.stderr, flush=True)
        r = run_gpu_one(kind, args)
        if "median_ms" in r:
            rows.append((label, 1e3 * r["median_ms"], None, r))
            print(f"  {kind}: {1e3 * r['median_ms']:.1f} us per step (median of {r['steps']}), "
                  f"process {r['process_s']:.1f} s", file=sys.stderr, flush=True)
        else:
            rows.append((label, None, r.get("skipped", "no result"), r))
            print(f"  {kind}: skipped: {r.get('skipped')}", file=sys.stderr, flush=True)
    l3 = rows[0][1]
    l2 = rows[1][1]
    steps = f"{args.steps} timed steps after {args.warmup} warm-up"
    if capj:
        steps += f" (capstep: {capj.get('steps')} after {capj.get('warmup')})"
    cap_size = capj.get("size") if capj else None
    if cap_size and cap_size != args.size:
        print(f"capstep JSON is of size {cap_size}, the peers of size {args.size}: not the same model",
              file=sys.stderr)
        return 3
    out = [f"us per step on the GPU (forward + backward + AdamW, batch up and loss down), model size {args.size} "
           f"({N_PARAMS:,} parameters, batch {B} x {T}): median of {steps}; "
           f"f32 dots in TF32" + ("" if not capj or capj.get("tf32") else " (capstep's run: full f32, --no-tf32)"),
           "", f"| {'run':<66} | {'us/step':>9} | {'tokens/s':>9} | {'peak MiB':>8} | {'run/[3]':>8} | {'run/[2]':>8} |",
           f"|{'-' * 68}|{'-' * 11}|{'-' * 11}|{'-' * 10}|{'-' * 10}|{'-' * 10}|"]
    for label, us, why, r in rows:
        if us is None:
            out.append(f"| {label:<66} | {'skipped':>9} | {'':>9} | {'':>8} | {'':>8} | {'':>8} |")
            out.append(f"|   skipped: {why}")
            continue
        r3 = f"{us / l3:.2f}x" if l3 else "-"
        r2 = f"{us / l2:.2f}x" if l2 else "-"
        tps = f"{B * T / (us * 1e-6):>9.0f}"
        peak = r.get("peak_bytes", r.get("device_bytes"))
        mib = f"{peak / 2**20:>8.0f}" if peak else f"{'-':>8}"
        out.append(f"| {label:<66} | {us:>9.1f} | {tps} | {mib} | {r3:>8} | {r2:>8} |")
    out += ["",
            "run/[3], run/[2]: the run's median over capstep lane 3's (lane 2's): how many times faster capstep's "
            "lane is (above 1: capstep faster). tokens/s: batch x seq over the median. peak MiB: PyTorch's "
            "max_memory_allocated, JAX's peak_bytes_in_use, capstep's device_bytes (every buffer it holds).",
            "Each Python run: its own process; batch from pinned host memory (torch) or numpy (JAX) every step; "
            "the loss read back (.item(), float()) ends the step; capstep's lanes time the same way with their own "
            "timer (and start from their own initialisation and corpus: a step's cost does not depend on the values)."]
    if capj:
        out.append(f"capstep: {capj.get('device', '')}")
    ran = [(label, r) for label, us, _, r in rows if us is not None and "framework" in r]
    if ran:
        ref_label, ref = ran[0]
        for label, r in ran[1:]:
            n10 = min(10, len(r["losses"]), len(ref["losses"]))
            d10 = max(abs(a - b) / abs(b) for a, b in zip(r["losses"][:n10], ref["losses"][:n10]))
            dall = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], ref["losses"]))
            out.append(f"losses, {label} vs {ref_label}: at most {d10:.1e} relative over the first {n10} steps, "
                       f"{dall:.1e} over all {len(r['losses'])} (TF32 rounding grows as training goes on)")
        lo = ref["losses"]
        out.append(f"{ref_label} losses: {lo[0]:.4f} (step 1) -> {lo[-1]:.4f} (step {len(lo)}) on random tokens; "
                   f"ln(64) = {math.log(64):.4f}")
    for label, r in ran:
        if r.get("compile_s") is not None:
            out.append(f"first step(s) incl. compile or capture, {label}: {r['compile_s']:.1f} s")
    gpus = sorted({str(r.get("gpu")) for _, r in ran if r.get("gpu")})
    versions = sorted({f"{r['framework']} {r['version']}" + (f" (CUDA {r['cuda']})" if r.get("cuda") else "")
                       for _, r in ran})
    out.append("GPU: " + (", ".join(gpus) or "-") + "; python " + platform.python_version() +
               (", " + ", ".join(versions) if versions else ""))
    print("\n".join(out))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"capstep": capj, "runs": [{"label": l, "us": us, "skipped": why, "result": r}
                                                 for l, us, why, r in rows]}, f, indent=1)
    return 0 if all(us is not None for _, us, _, _ in rows[2:]) else 3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", choices=["torch", "torch-compile", "jax"] + [k for k, _ in GPU_RUNS],
                    help="one measurement, one JSON line")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--fused", action="store_true", help="torch: AdamW(fused=True)")
    ap.add_argument("--autocast-bf16", action="store_true",
                    help="torch: the forward under torch.autocast(\"cpu\", torch.bfloat16)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--table", action="store_true", help="every measurement, one table")
    ap.add_argument("--capstep-bin", help="path of training_step_on_device (lane 1 joins the table)")
    ap.add_argument("--gpu-table", action="store_true", help="every GPU measurement, one table")
    ap.add_argument("--capstep-json", help="--gpu-table: the output of training_step_on_device --json "
                                           "(lanes 2 and 3 join the table)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="the GPU modes' device (cpu: a check of this script where there is no GPU)")
    ap.add_argument("--pin-cpu", type=int, help="pin capstep and the 1-thread runs to this CPU (taskset)")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per measurement")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every run")
    ap.add_argument("--json-out", help="also write every figure here")
    ap.add_argument("--size", choices=list(SIZES), default="seed", help="the model of the size ladder")
    ap.add_argument("--arch", choices=ARCHES, default="seed",
                    help="the architecture (capstep's --arch; gpt2 and llama need --capstep-bin to be the capstep CLI)")
    ap.add_argument("--kv-heads", type=int, default=0,
                    help="--arch llama: key/value heads, dividing the size's heads (grouped-query attention); "
                         "0: as many as heads")
    ap.add_argument("--rows", choices=["all", "core"], default="all",
                    help="--table: all rows, or core: capstep lane 1, PyTorch eager, torch.compile and JAX jit "
                         "on each of --table-threads")
    ap.add_argument("--table-threads", default="1,2", help="--table: only rows of these thread counts (1, 2 or 1,2)")
    ap.add_argument("--check-hf-goldens", metavar="DIR",
                    help="check the PyTorch and JAX models against transformers' loss on DIR/{gpt2,llama} "
                         "(tests/golden/hf, made by scripts/make-hf-goldens)")
    ap.add_argument("--runs", help="--gpu-table: only these runs, comma-separated (e.g. torch-cuda-graph,jax-gpu)")
    args = ap.parse_args()
    global PIN_CPU, SIZE_NAME
    PIN_CPU = args.pin_cpu
    SIZE_NAME = args.size
    if args.kv_heads and args.arch != "llama":
        ap.error("--kv-heads applies to --arch llama")
    set_size(args.size, args.arch, kv_heads=args.kv_heads)
    if args.warmup < 1 or args.steps < 1 or args.rounds < 1:
        ap.error("--warmup, --steps and --rounds must be at least 1")
    if args.run == "torch":
        print(json.dumps(run_torch(args, compiled=False)))
    elif args.run == "torch-compile":
        print(json.dumps(run_torch(args, compiled=True)))
    elif args.run == "jax":
        print(json.dumps(run_jax(args)))
    elif args.run in ("torch-cuda", "torch-cuda-compile", "torch-cuda-graph"):
        mode = {"torch-cuda": "eager", "torch-cuda-compile": "compile", "torch-cuda-graph": "graph"}[args.run]
        print(json.dumps(run_torch_gpu(args, mode)))
    elif args.run == "jax-gpu":
        print(json.dumps(run_jax(args, gpu=True)))
    elif args.check_hf_goldens:
        sys.exit(check_hf_goldens(args.check_hf_goldens))
    elif args.table:
        table(args)
    elif args.gpu_table:
        sys.exit(gpu_table(args))
    else:
        ap.error("give --run KIND, --table or --gpu-table")


if __name__ == "__main__":
    main()
