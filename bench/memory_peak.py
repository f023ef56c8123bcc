#!/usr/bin/env python3
"""Peak RSS of a full fine-tuning step: capstep against PyTorch eager.

  bench/memory-peak [--models gpt2,smollm] [--steps 3] [-- extra capstep train options]

(bench/memory-peak makes the venv with torch and transformers, then runs this
file in it.) For each model it makes, once, a directory in transformers'
layout from a config with random weights (no hub): GPT-2 124M from
`GPT2Config()` (vocab 50257) and a Llama of SmolLM-135M's shape (30 layers,
d 576, 9 query / 3 key-value heads, d_ff 1536, vocab 49152, untied head:
163M parameters; `smollm-tied` ties it, as SmolLM2 does: 135M), with a
byte-level BPE tokenizer of the vocabulary's size (vocab.json + merges.txt,
merges made up; its ids are only data here). Then, each in a child process of
its own, the same training on B 2 x T 256 with AdamW in f32, 2 threads:

  capstep:  capstep train --init-from DIR --batch 2 --seq 256 --steps N (the
            built-in corpus, the defaults otherwise: validation at the end)
  capstep (no validation): the same with --val-fraction 0
  PyTorch:  from_pretrained(DIR), torch.optim.AdamW, N steps of
            loss.backward(); opt.step(); opt.zero_grad() on random ids

and prints each one's peak RSS (ru_maxrss of the child, from wait4) and the
ratio capstep / PyTorch.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

from bench_threads import thread_env  # bench/bench_threads.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODELS = {
    "gpt2": ("gpt2", {}),
    "smollm": ("llama", dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                             num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                             rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)),
    "smollm-tied": ("llama", dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                  num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                                  rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True)),
}


def bytelevel_vocab(size):
    """GPT-2's byte-to-unicode table, then made-up merges of two bytes' symbols
    until `size` ids (the last one <|endoftext|>): a valid byte-level BPE of
    that vocabulary (at most 256 + 65536 ids)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    base = [chr(c) for c in cs]
    merges = [(x, y) for x in base for y in base][: size - 1 - 256]
    toks = base + [x + y for x, y in merges] + ["<|endoftext|>"]
    assert len(toks) == size, (len(toks), size)
    return {t: k for k, t in enumerate(toks)}, merges


def make_model(name, out):
    """(in a child: torch stays out of this process) the model directory."""
    code = f"""
import json, torch, transformers
arch, kw = {MODELS[name]!r}
torch.manual_seed(0)
if arch == "gpt2":
    m = transformers.GPT2LMHeadModel(transformers.GPT2Config(**kw))
else:
    m = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw))
m.save_pretrained({out!r}, safe_serialization=True)
"""
    subprocess.run([sys.executable, "-c", code], check=True)
    vocab_size = json.load(open(os.path.join(out, "config.json")))["vocab_size"]
    vocab, merges = bytelevel_vocab(vocab_size)
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")


TORCH_RUN = """
import sys, torch, transformers
d, steps, b, t, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
torch.manual_seed(0)
m = transformers.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32)
m.train()
opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
V = m.config.vocab_size
for s in range(steps):
    ids = torch.randint(0, V, (b, t))
    loss = m(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {s + 1} loss {loss.item():.4f}", flush=True)
"""


def peak_of(cmd, env, log):
    """The child's peak RSS in bytes (ru_maxrss, from wait4), and its exit status."""
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return ru.ru_maxrss * 1024, p.returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="gpt2,smollm")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--capstep-bin", default=os.path.join(ROOT, "build", "capstep"))
    ap.add_argument("--models-dir", default=os.path.join(tempfile.gettempdir(), "capstep-memory-models"),
                    help="where the model directories are made (kept: made once)")
    ap.add_argument("--no-torch", action="store_true", help="capstep's runs only")
    ap.add_argument("--no-val-run", action="store_true", help="leave out the --val-fraction 0 run")
    ap.add_argument("extra", nargs="*", help="more `capstep train` options (after --)")
    a = ap.parse_args()
    logs = tempfile.mkdtemp(prefix="memory-peak-")
    rows = []
    for name in a.models.split(","):
        d = os.path.join(a.models_dir, name)
        if not os.path.exists(os.path.join(d, "merges.txt")):
            os.makedirs(d, exist_ok=True)
            make_model(name, d)
        base = [a.capstep_bin, "train", "--init-from", d, "--batch", str(a.batch), "--seq", str(a.seq), "--steps",
                str(a.steps), "--no-progress"] + a.extra
        runs = [("capstep", base)]
        if not a.no_val_run:
            runs.append(("capstep --val-fraction 0", base + ["--val-fraction", "0"]))
        if not a.no_torch:
            runs.append(("PyTorch eager", [sys.executable, "-c", TORCH_RUN, d, str(a.steps), str(a.batch), str(a.seq),
                                           str(a.threads)]))
        got = {}
        for label, cmd in runs:
            log = os.path.join(logs, f"{name}-{len(got)}.log")
            peak, rc = peak_of(cmd, thread_env(a.threads, capstep=label.startswith("capstep")), log)
            if rc != 0:
                print(f"{name}: {label}: exit {rc}; see {log}", file=sys.stderr)
                print(open(log).read()[-2000:], file=sys.stderr)
                continue
            got[label] = peak
            print(f"{name}: {label}: peak RSS {peak / 1e9:.3f} GB ({log})", flush=True)
        rows.append((name, got))
    print()
    print(f"| model | run (B {a.batch} x T {a.seq}, {a.threads} threads, {a.steps} steps) | peak RSS GB | vs PyTorch |")
    print("|---|---|---|---|")
    for name, got in rows:
        ref = got.get("PyTorch eager")
        for label, peak in got.items():
            ratio = f"{peak / ref:.2f}" if ref else "-"
            print(f"| {name} | {label} | {peak / 1e9:.3f} | {ratio} |")


if __name__ == "__main__":
    main()
