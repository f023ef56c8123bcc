#!/usr/bin/env python3
"""LoRA fine-tuning step: capstep against PEFT (PyTorch), same weights, same run.

For each model (GPT-2 124M, transformers' GPT2Config(); a Llama of
SmolLM2-135M's configuration: hidden 576, 30 layers, 9 heads, 3 key/value
heads, intermediate 1536, vocab 49152, tied embeddings, rope_theta 100000),
random weights (no hub) saved by transformers under --workdir, then rounds of
  capstep train --init-from DIR --tokens IDS --lora-rank 8 --lora-alpha 16
      --lora-targets all-linear --batch 2 --seq 256 (AdamW, 2 threads)
  PEFT 0.21: get_peft_model(LoraConfig(r=8, lora_alpha=16,
      target_modules="all-linear", lora_dropout=0)) on the same directory,
      torch.optim.AdamW over the adapters, batches of 2 x 256 from the same ids
one after the other (capstep first in odd rounds, PEFT first in even ones),
each its own process. Reported: each run's median step after --warmup steps
(capstep: from its --log CSV's elapsed_s; PEFT: time.perf_counter around
forward + backward + step + zero_grad), and its peak RSS (the child's
ru_maxrss from wait4, which includes loading the model); the table gives the
median over rounds of each and capstep / PEFT.

Usage: VENV/bin/python bench/lora_peft.py [--build build] [--models gpt2,smollm2]
         [--rounds 3] [--steps 10] [--warmup 2] [--capstep-args "..."] [--peft-autocast]
VENV from scripts/peft-venv (torch, transformers, peft, safetensors).
"""
import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from bench_threads import thread_env  # bench/bench_threads.py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
THREADS = 2


def make_config(name):
    from transformers import GPT2Config, LlamaConfig
    if name == "gpt2":
        return GPT2Config(bos_token_id=0, eos_token_id=0)
    if name == "smollm2":
        return LlamaConfig(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                           intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0,
                           max_position_embeddings=8192, rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=0)
    raise SystemExit(f"unknown model {name}")


def corpus_files():
    """Text to train a tokenizer on, found on any Debian: Python's own sources."""
    import glob
    import sysconfig
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "**", "*.py"), recursive=True))
    if not files:
        raise SystemExit("no Python sources found to train a tokenizer on")
    return files


def make_tokenizer(name, out, vocab):
    """A byte-level BPE of exactly `vocab` ids trained with the tokenizers library
    (no hub): SmolLM2's layout for smollm2 (Digits then ByteLevel, <|endoftext|>,
    <|im_start|>, <|im_end|> as ids 0-2, ChatML's BOS/EOS), GPT-2's for gpt2
    (ByteLevel, <|endoftext|> as id 0)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if name == "smollm2":
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        cfg = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
    else:
        specials = ["<|endoftext|>"]
        tok.pre_tokenizer = byte_level
        cfg = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    def texts():
        for path in corpus_files():
            try:
                with open(path, encoding="utf-8") as f:
                    yield f.read()
            except (UnicodeDecodeError, OSError):
                pass
    tok.train_from_iterator(texts(), trainer)
    if tok.get_vocab_size() != vocab:
        raise SystemExit(f"the tokenizer has {tok.get_vocab_size()} ids, not {vocab}: more text needed")
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(dict(cfg, tokenizer_class="PreTrainedTokenizerFast", model_max_length=8192), f, indent=1)


def make_model(name, out, seed=38):
    """Random weights for the named configuration, saved by transformers (f32
    safetensors), and a tokenizer of its vocabulary."""
    import torch
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    config = make_config(name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    make_tokenizer(name, out, config.vocab_size)


def make_tokens(path, vocab, n=1 << 20, seed=38):
    import numpy as np
    rng = np.random.default_rng(seed)
    rng.integers(0, vocab, size=n, dtype=np.uint16).tofile(path)


def peft_run(model_dir, tokens, steps, batch, seq, autocast=False):
    """One PEFT measurement in this process: JSON with each step's seconds.
    autocast: forward and loss under torch.autocast("cpu", bfloat16), as
    PyTorch's mixed precision runs (bf16 GEMMs, f32 weights and AdamW)."""
    import contextlib
    import numpy as np
    import torch
    import torch.nn.functional as F
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(THREADS)
    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0,
                                             task_type="CAUSAL_LM"))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=0.01)
    ids = torch.from_numpy(np.fromfile(tokens, dtype=np.uint16).astype(np.int64))
    gen = torch.Generator().manual_seed(1)
    times, losses = [], []
    for _ in range(steps):
        starts = torch.randint(0, ids.numel() - seq - 1, (batch,), generator=gen)
        win = torch.stack([ids[s:s + seq + 1] for s in starts.tolist()])
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
            logits = model(input_ids=win[:, :-1]).logits
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), win[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    print(json.dumps({"times": times, "losses": losses,
                      "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad)}))


def run_measured(cmd, env):
    """cmd under /usr/bin/time-like accounting: os.wait4 gives the child's own ru_maxrss."""
    import tempfile
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        p = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=fo, stderr=fe, text=True)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        return fo.read(), fe.read(), p.returncode, ru.ru_maxrss * 1024


def median_after(xs, warmup):
    xs = xs[warmup:]
    return statistics.median(xs) if xs else float("nan")


def capstep_once(a, model_dir, tokens, log):
    cmd = [os.path.join(a.build, "capstep"), "train", "--init-from", model_dir, "--tokens", tokens,
           "--tokens-format", "raw-u16", "--val-fraction", "0", "--lora-rank", "8", "--lora-alpha", "16",
           "--lora-targets", "all-linear", "--batch", str(a.batch), "--seq", str(a.seq), "--steps", str(a.steps),
           "--log", log, "--overwrite", "--no-progress"] + a.capstep_args.split()
    out, err, rc, rss = run_measured(cmd, thread_env(THREADS, capstep=True))
    if rc != 0:
        return None, f"capstep exit {rc}: {(err.strip().splitlines() or ['?'])[-1][:200]}", out + err
    with open(log) as f:
        rows = list(csv.DictReader(f))
    el = [float(r["elapsed_s"]) for r in rows]
    # elapsed_s is cumulative from the start of training: step k's time is the difference.
    steps = [el[0]] + [el[i] - el[i - 1] for i in range(1, len(el))]
    return {"step": median_after(steps, a.warmup), "rss": rss, "losses": [float(r["loss"]) for r in rows],
            "steps": steps}, None, out + err


def peft_once(a, model_dir, tokens):
    cmd = [sys.executable, os.path.abspath(__file__), "--peft-run", model_dir, "--tokens", tokens, "--steps",
           str(a.steps), "--batch", str(a.batch), "--seq", str(a.seq)] + (["--peft-autocast"] if a.peft_autocast else [])
    out, err, rc, rss = run_measured(cmd, thread_env(THREADS))
    if rc != 0:
        return None, f"PEFT exit {rc}: {(err.strip().splitlines() or ['?'])[-1][:200]}", err
    j = json.loads(out.strip().splitlines()[-1])
    return {"step": median_after(j["times"], a.warmup), "rss": rss, "losses": j["losses"], "steps": j["times"],
            "trainable": j["trainable"]}, None, ""


def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, cwd=ROOT).stdout.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--models", default="gpt2,smollm2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--workdir", default="out/lora-bench")
    ap.add_argument("--capstep-args", default="", help="more capstep train options, e.g. '--base-precision bf16'")
    ap.add_argument("--peft-autocast", action="store_true",
                    help="PEFT's forward under torch.autocast(bfloat16) (to set beside --capstep-args '--precision bf16')")
    ap.add_argument("--only", choices=["capstep", "peft"], help="run one side only")
    ap.add_argument("--peft-run", metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--tokens", help=argparse.SUPPRESS)
    ap.add_argument("--make-model", nargs=2, metavar=("NAME", "DIR"), help="only write the model NAME (gpt2, smollm2) "
                    "with random weights and a tokenizer to DIR")
    a = ap.parse_args()
    if a.make_model:
        return make_model(*a.make_model)
    if a.peft_run:
        return peft_run(a.peft_run, a.tokens, a.steps, a.batch, a.seq, a.peft_autocast)

    import peft
    import torch
    import transformers
    os.makedirs(os.path.join(ROOT, a.workdir), exist_ok=True)
    print(f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; commit {sh('git rev-parse --short HEAD')}"
          f"{' (dirty)' if sh('git status --porcelain --untracked-files=no') else ''}")
    cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
    print(f"cpu {cpu}; nproc {os.cpu_count()}; "
          f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"peft {peft.__version__}; {THREADS} threads each")
    print(f"load before: {os.getloadavg()[0]:.2f}")
    print(f"capstep train ... --lora-rank 8 --lora-alpha 16 --lora-targets all-linear --batch {a.batch} "
          f"--seq {a.seq} --steps {a.steps} {a.capstep_args}".rstrip())
    if a.peft_autocast:
        print("PEFT under torch.autocast(\"cpu\", dtype=torch.bfloat16)")
    results = {}
    for name in a.models.split(","):
        d = os.path.join(ROOT, a.workdir, name)
        if not os.path.exists(os.path.join(d, "config.json")):
            make_model(name, d)
        tokens = os.path.join(ROOT, a.workdir, f"{name}-ids.u16")
        if not os.path.exists(tokens):
            make_tokens(tokens, make_config(name).vocab_size)
        cs, ps = [], []
        for k in range(a.rounds):
            order = ["capstep", "peft"] if k % 2 == 0 else ["peft", "capstep"]
            if a.only:
                order = [a.only]
            for who in order:
                if who == "capstep":
                    r, err, text = capstep_once(a, d, tokens, os.path.join(ROOT, a.workdir, f"{name}-capstep.csv"))
                    if k == 0 and r:
                        for line in text.splitlines():
                            if line.startswith(("GEMM:", "host:", "LoRA ", "lane ")):
                                print(f"  [{name}] {line}")
                    (cs if r else []).append(r)
                else:
                    r, err, _ = peft_once(a, d, tokens)
                    (ps if r else []).append(r)
                if err:
                    print(f"  [{name}] round {k + 1} {who}: {err}")
                else:
                    print(f"  [{name}] round {k + 1} {who}: median step {r['step']:.3f} s, peak RSS "
                          f"{r['rss'] / 1e9:.2f} GB, steps {' '.join(f'{x:.2f}' for x in r['steps'])}, "
                          f"loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}")
        results[name] = (cs, ps)
    print(f"load after: {os.getloadavg()[0]:.2f}")
    print()
    print("| model | capstep step (s) | PEFT step (s) | step ratio | capstep peak RSS (GB) | PEFT peak RSS (GB) | RSS ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, (cs, ps) in results.items():
        def med(xs, key):
            return statistics.median(x[key] for x in xs) if xs else float("nan")
        def rng(xs, key, scale=1.0):
            return f" ({min(x[key] for x in xs) / scale:.2f}-{max(x[key] for x in xs) / scale:.2f})" if xs else ""
        c, p = med(cs, "step"), med(ps, "step")
        cr, pr = med(cs, "rss"), med(ps, "rss")
        print(f"| {name} | {c:.3f}{rng(cs, 'step')} | {p:.3f}{rng(ps, 'step')} | {c / p:.2f}x | "
              f"{cr / 1e9:.2f}{rng(cs, 'rss', 1e9)} | {pr / 1e9:.2f}{rng(ps, 'rss', 1e9)} | {cr / pr:.2f}x |")


if __name__ == "__main__":
    main()
