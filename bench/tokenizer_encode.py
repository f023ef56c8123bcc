#!/usr/bin/env python3
"""Byte-level BPE encoding speed: capstep beside the `tokenizers` library (and
tiktoken) with GPT-2's real vocabulary of 50,257 ids, on the same text.

GPT-2's vocabulary is not in the repository: it is whisper/assets/gpt2.tiktoken
inside openai-whisper's source archive on PyPI, for example

    pip download --no-deps --no-binary :all: openai-whisper -d /tmp/whisper-dl
    tar xzf /tmp/whisper-dl/openai_whisper-*.tar.gz -C /tmp/whisper

This script converts it to a tokenizer.json (the merges recovered from the
ranks, as transformers' TikTokenConverter does), checks the conversion
against tiktoken on the text, makes a second tokenizer.json with the same
vocabulary under Llama 3's pre-tokenizer (Split by its regex, then ByteLevel
without GPT-2's regex: capstep's PCRE2 path), and for each runs

    bench_tokenizer_encode (build target; capstep, one thread)
    tokenizers.Tokenizer.encode (the whole text as one, and in parts of about
        16 KB with encode_batch; one thread: RAYON_NUM_THREADS=1)
    tiktoken's encode_ordinary (GPT-2's regex only)

on a text of about --mb MB made of the repository's own files (docs, sources,
tests: code and English), best of --repeats runs each, and checks that
capstep's ids equal the `tokenizers` library's.

    python3 bench/tokenizer_encode.py --tiktoken /tmp/whisper/.../gpt2.tiktoken \\
        [--bench build/bench_tokenizer_encode] [--mb 4] [--repeats 3]
"""
import argparse, base64, glob, json, os, subprocess, sys, tempfile, time

# One thread for the `tokenizers` library's batches too (rayon).
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import numpy as np
import tiktoken
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def byte_alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def bpe(ranks, token, max_rank):
    parts = [bytes([b]) for b in token]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best is None or r < best[1]):
                best = (i, r)
        if best is None or best[1] >= max_rank:
            return parts
        i = best[0]
        parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]


def convert(path):
    ranks = {}
    for line in open(path, "rb").read().splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    alpha = byte_alphabet()
    text_of = lambda b: "".join(alpha[x] for x in b)
    vocab = {text_of(t): r for t, r in ranks.items()}
    merges = []
    for t, r in sorted(ranks.items(), key=lambda x: x[1]):
        if len(t) > 1:
            parts = bpe(ranks, t, r)
            assert len(parts) == 2, (t, parts)
            merges.append((text_of(parts[0]), text_of(parts[1])))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    enc = tiktoken.Encoding("gpt2", pat_str=GPT2_PAT, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": len(ranks)})
    return tok, enc


def repository_text(mb):
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    files = sorted(glob.glob(f"{root}/docs/*.md") + glob.glob(f"{root}/src/**/*.cpp", recursive=True) +
                   glob.glob(f"{root}/src/**/*.h", recursive=True) + glob.glob(f"{root}/tests/*.cpp"))
    parts = []
    for f in files:
        try:
            parts.append(open(f, encoding="utf-8").read())
        except UnicodeDecodeError:
            pass
    one = "\n".join(parts)
    # The sources name GPT-2's special token; capstep (by default) and
    # tiktoken's encode_ordinary take it as text, `tokenizers` as the token.
    one = one.replace("<|endoftext|>", "<|end of text|>")
    text = one * (int(mb * 1e6) // len(one.encode()) + 1)
    return text.encode()[: int(mb * 1e6)].decode("utf-8", "ignore")


def parts(text, size=16384):
    """The text in parts of about `size` characters, cut after a newline
    between two printable ASCII characters: a place where GPT-2's regex and
    Llama 3's cut too, so the parts' ids are the whole text's."""
    out, begin = [], 0
    while begin < len(text):
        end = len(text)
        p = begin + size
        while p + 1 < len(text):
            if text[p] == "\n" and "!" <= text[p - 1] <= "~" and "!" <= text[p + 1] <= "~":
                end = p + 1
                break
            p += 1
        out.append(text[begin:end])
        begin = end
    return out


def best_of(repeats, f):
    """The best wall-clock and CPU times (the process's, one thread) of
    `repeats` runs of f, and its result."""
    best, best_cpu, out = 1e30, 1e30, None
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        out = f()
        best_cpu = min(best_cpu, time.process_time() - c)
        best = min(best, time.perf_counter() - t)
    return (best, best_cpu), out


def rate(size, secs):
    return f"{size / secs[0]:.2f} MB/s (wall), {size / secs[1]:.2f} MB/s (CPU time)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiktoken", required=True)
    ap.add_argument("--bench", default="build/bench_tokenizer_encode")
    ap.add_argument("--mb", type=float, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    tok, enc = convert(a.tiktoken)
    text = repository_text(a.mb)
    size = len(text.encode()) / 1e6
    print(f"text: {size:.2f} MB of the repository's docs, sources and tests; vocabulary {tok.get_vocab_size()} ids")
    with tempfile.TemporaryDirectory() as d:
        open(f"{d}/text.txt", "wb").write(text.encode())
        j = json.loads(tok.to_str())
        split = dict(j, pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]})
        for name, tj in (("GPT-2 (ByteLevel regex)", j), ("Llama 3 pre-tokenizer (Split + ByteLevel)", split)):
            open(f"{d}/tokenizer.json", "w").write(json.dumps(tj))
            t = Tokenizer.from_file(f"{d}/tokenizer.json")
            secs, ids = best_of(a.repeats, lambda: t.encode(text, add_special_tokens=False).ids)
            chunks = parts(text)
            bsecs, bids = best_of(a.repeats, lambda: [i for e in t.encode_batch(chunks, add_special_tokens=False)
                                                      for i in e.ids])
            assert bids == ids, "the parts' ids differ from the whole text's"
            out = subprocess.run([a.bench, f"{d}/tokenizer.json", f"{d}/text.txt", str(a.repeats), f"{d}/ids.bin"],
                                 check=True, capture_output=True, text=True).stdout.strip()
            mine = np.fromfile(f"{d}/ids.bin", dtype="<i4").tolist()
            print(f"{name}:")
            print(f"  {out}")
            print(f"  tokenizers {__import__('tokenizers').__version__}: {rate(size, secs)} as one text; "
                  f"{rate(size, bsecs)} in {len(chunks)} parts (encode_batch, one thread); {len(ids)} ids")
            if tj is j:
                esecs, eids = best_of(a.repeats, lambda: enc.encode_ordinary(text))
                assert eids == ids, "the converted tokenizer.json differs from tiktoken's GPT-2"
                print(f"  tiktoken {tiktoken.__version__}: {rate(size, esecs)} (the same ids)")
            print("  capstep's ids " + ("equal" if mine == ids else "DIFFER from") + " the tokenizers library's")
            if mine != ids:
                sys.exit(1)


if __name__ == "__main__":
    main()
