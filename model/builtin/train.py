#!/usr/bin/env python3
"""Trains strata's built-in model: a small Llama on the King James Bible, shaped as chats.

The model is byte-level (strata's ByteTokenizer: 256 bytes + BOS, EOS, SYSTEM, USER,
ASSISTANT, END, padded to 264) and its training text is laid out in the built-in chat
template -- BOS, then per message ROLE content END, then ASSISTANT for the reply -- so that
`strata serve` with no --model answers a chat with readable (if archaic) English.

The text: Debian's bible-kjv-text (public domain; model/builtin/kjv_text.sh writes it).
Every 20th chapter is held out: its plain text is written as held_out.txt, and its bits per
byte are measured here and by `strata ppl` (docs/BENCHMARKS.md).

Run on the GPU machine (PyTorch + transformers); deterministic for a given --seed:
  python3 model/builtin/train.py --text kjv.txt --out model/builtin
Writes OUT/config.json and OUT/model.safetensors (a Hugging Face Llama directory, BF16),
OUT/held_out.txt, and prints the loss curve, held-out bits per byte and sample replies.
"""
import argparse
import json
import math
import os
import random
import re
import time

import numpy as np
import torch
import torch.nn.functional as F

BOS, EOS, SYSTEM, USER, ASSISTANT, END = range(256, 262)
VOCAB = 264
# Placeholders for the special tokens inside a bytes buffer (the KJV text is ASCII).
_MARK = {BOS: 0xF0, SYSTEM: 0xF2, USER: 0xF3, ASSISTANT: 0xF4, END: 0xF5}

SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "You are a helpful assistant. Answer briefly.",
    "Answer in the words of the King James Bible.",
    "You are strata's built-in model. Reply to the user.",
    "You are a wise and patient teacher.",
]
TOPIC_TEMPLATES = [
    "Tell me about {}.", "What of {}?", "Who was {}?", "What does the Bible say about {}?",
    "Speak to me of {}.", "What do you know of {}?", "Tell me something about {}.", "{}?",
    "I want to hear about {}.", "Can you tell me about {}?",
]
LOWER_TOPIC_TEMPLATES = [
    "Tell me about the {}.", "What of the {}?", "What does the Bible say about {}?",
    "Speak to me of {}.", "Tell me something about {}.", "What is {}?",
]
GENERIC_PROMPTS = [
    "Hello!", "Hi.", "Hello, how are you?", "Good morning.", "Who are you?", "What can you do?",
    "Tell me a story.", "Say something wise.", "Thanks.", "Thank you!", "What should I do?",
    "Give me some advice.", "What should I pack for a long journey?", "Where should I go?",
    "I am afraid.", "I am tired.", "What is the meaning of life?", "Summarise that in one line.",
    "Go on.", "Continue.", "And then?", "Tell me more.", "Why?", "Is that so?", "What happened next?",
    "Hello! I am planning a week of hiking in the Alps in September. What should I pack?",
    "Which huts would you book, and how early?", "Summarise the whole plan in three short bullet points.",
    "What is the weather like?", "Write a short poem.", "What is love?", "How should I live?",
]
STOP = set("""the and of to that in he shall unto for i his a they be is him not them it with all thou thy
was which my me but ye their have thee from as are when this out were by upon will there you
so then had an or no up also your into at even one what who we before our these she her
said hath did do us let because now every made go let came come shalt say""".split())


def parse_kjv(path):
    """[(book, chapter, [verse texts])] in order."""
    chapters, verses, book, chap, cur = [], [], None, None, None
    header = re.compile(r"^([1-3] )?[A-Z][A-Za-z ]* (\d+)$")
    verse = re.compile(r"^\s+(\d+) (.*)$")
    for line in open(path, encoding="ascii"):
        line = line.rstrip("\n")
        if not line.strip():
            continue
        if header.match(line):
            if cur is not None:
                verses.append(cur)
            if book is not None:
                chapters.append((book, chap, verses))
            book, chap = line.rsplit(" ", 1)
            verses, cur = [], None
        elif verse.match(line):
            if cur is not None:
                verses.append(cur)
            cur = verse.match(line).group(2).strip()
        elif cur is not None:
            cur += " " + line.strip()
    if cur is not None:
        verses.append(cur)
    chapters.append((book, chap, verses))
    return chapters


def topics(chapters):
    """Proper names and common nouns that appear often enough to ask about."""
    count = {}
    for _, _, vs in chapters:
        for v in vs:
            for i, w in enumerate(re.findall(r"[A-Za-z]+", v)):
                count[(w, i == 0)] = count.get((w, i == 0), 0) + 1
    names = sorted(w for (w, first), n in count.items()
                   if not first and w[0].isupper() and w.upper() != w and n >= 20 and w.lower() not in STOP)
    after_the = {}
    for _, _, vs in chapters:
        for v in vs:
            for w in re.findall(r"\bthe ([a-z]+)", v):
                after_the[w] = after_the.get(w, 0) + 1
    nouns = sorted(w for (w, first), n in count.items() if not first and w.islower() and 40 <= n <= 4000
                   and len(w) >= 4 and w not in STOP and after_the.get(w, 0) >= n // 4)
    return names, nouns


class Corpus:
    """Builds training text in the chat template from a list of chapters."""

    def __init__(self, chapters, seed):
        self.chapters = chapters
        self.rng = random.Random(seed)
        self.names, self.nouns = topics(chapters)
        self.by_word = {}
        for ci, (_, _, vs) in enumerate(chapters):
            for vi, v in enumerate(vs):
                for w in set(re.findall(r"[A-Za-z]+", v)):
                    self.by_word.setdefault(w, []).append((ci, vi))

    def passage(self, ci, vi, n):
        vs = self.chapters[ci][2]
        return " ".join(vs[vi:vi + n])

    def reply(self, ci, vi):
        n = self.rng.choice([1, 1, 2, 2, 3])
        return self.passage(ci, vi, n), n

    def message(self, role, text):
        return bytes([_MARK[role]]) + text.encode("ascii") + bytes([_MARK[END]])

    def conversation(self):
        r = self.rng
        out = bytearray([_MARK[BOS]])
        if r.random() < 0.3:
            out += self.message(SYSTEM, r.choice(SYSTEM_PROMPTS))
        ci = r.randrange(len(self.chapters))
        vi = r.randrange(len(self.chapters[ci][2]))
        for _ in range(r.choice([1, 2, 2, 3, 4])):
            kind = r.random()
            book, chap, vs = self.chapters[ci]
            if kind < 0.3 and vi + 1 < len(vs):  # continue the passage the user quotes
                n = r.choice([1, 1, 2])
                user = self.passage(ci, vi, n)
                vi = min(vi + n, len(vs) - 1)
            elif kind < 0.6:  # ask about a name or a thing; answer with a verse that names it
                lower = r.random() < 0.4
                word = r.choice(self.nouns if lower else self.names)
                user = r.choice(LOWER_TOPIC_TEMPLATES if lower else TOPIC_TEMPLATES).format(word)
                ci, vi = r.choice(self.by_word[word])
                book, chap, vs = self.chapters[ci]
            elif kind < 0.7:  # a reference
                vi = r.randrange(len(vs))
                user = r.choice(["Read me {} {}:{}.", "{} {}:{}", "What does {} {}:{} say?"]).format(book, chap, vi + 1)
            else:  # anything else: the story goes on
                user = r.choice(GENERIC_PROMPTS)
            text, n = self.reply(ci, vi)
            out += self.message(USER, user)
            out += bytes([_MARK[ASSISTANT]]) + text.encode("ascii") + bytes([_MARK[END]])
            vi += n
            if vi + 1 >= len(vs):
                ci = (ci + 1) % len(self.chapters)
                vi = 0
        return bytes(out)

    def plain(self):
        """A run of verses as plain text after BOS (the model also sees unwrapped prose)."""
        r = self.rng
        ci = r.randrange(len(self.chapters))
        vi = r.randrange(len(self.chapters[ci][2]))
        return bytes([_MARK[BOS]]) + self.passage(ci, vi, r.randrange(4, 24)).encode("ascii")

    def tokens(self, n_bytes):
        parts, total = [], 0
        while total < n_bytes:
            p = self.plain() if self.rng.random() < 0.3 else self.conversation()
            parts.append(p)
            total += len(p)
        a = np.frombuffer(b"".join(parts), dtype=np.uint8).astype(np.int64)
        for tok, mark in _MARK.items():
            a[a == mark] = tok
        return torch.from_numpy(a)


def chat_tokens(messages):
    ids = [BOS]
    for role, text in messages:
        ids.append({"system": SYSTEM, "user": USER, "assistant": ASSISTANT}[role])
        ids += list(text.encode())
        ids.append(END)
    return ids + [ASSISTANT]


def bits_per_byte(model, data, window, stride, device):
    """Teacher-forced bits per byte of `data` (BOS + text bytes), sliding window."""
    model.eval()
    nll, count = 0.0, 0
    with torch.no_grad():
        for begin in range(0, data.numel() - 1, stride):
            start = max(0, begin + stride - window) if begin else 0
            end = min(begin + stride, data.numel() - 1)
            x = data[start:end + 1].to(device)
            logits = model(x[None, :-1]).logits.float()[0]
            lp = F.log_softmax(logits, -1)
            tgt = x[1:]
            scored = slice(begin - start, end - start)
            nll -= lp[scored].gather(1, tgt[scored, None]).sum().item()
            count += end - begin
    model.train()
    return nll / count / math.log(2), count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", required=True, help="kjv.txt from model/builtin/kjv_text.sh")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20261124)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--batch", type=int, default=96)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--corpus_bytes", type=int, default=60_000_000)
    args = ap.parse_args()

    from transformers import LlamaConfig, LlamaForCausalLM
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = "cuda"
    t0 = time.time()

    chapters = parse_kjv(args.text)
    held = [c for i, c in enumerate(chapters) if i % 20 == 7]
    train = [c for i, c in enumerate(chapters) if i % 20 != 7]
    os.makedirs(args.out, exist_ok=True)
    held_text = "\n".join(f"{b} {c}\n" + "\n".join(vs) for b, c, vs in held) + "\n"
    with open(os.path.join(args.out, "held_out.txt"), "w") as f:
        f.write(held_text)
    corpus = Corpus(train, args.seed)
    data = corpus.tokens(args.corpus_bytes)
    held_data = torch.tensor([BOS] + list(held_text.encode()), dtype=torch.long)
    print(f"{len(chapters)} chapters ({len(held)} held out), {len(corpus.names)} names, {len(corpus.nouns)} nouns;"
          f" corpus {data.numel() / 1e6:.1f}M tokens built in {time.time() - t0:.0f} s", flush=True)

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=768, num_hidden_layers=8,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=8192,
                         rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False, attention_bias=False,
                         bos_token_id=BOS, eos_token_id=[EOS, END], initializer_range=0.02)
    model = LlamaForCausalLM(config).to(device)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params / 1e6:.2f}M parameters", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), fused=True)
    warmup = 100

    def lr_at(step):
        if step < warmup:
            return args.lr * (step + 1) / warmup
        p = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * p)))

    gen = torch.Generator().manual_seed(args.seed)
    t_train = time.time()
    best = (float("inf"), None)
    for step in range(args.steps):
        starts = torch.randint(0, data.numel() - args.seq - 1, (args.batch,), generator=gen)
        batch = torch.stack([data[s:s + args.seq + 1] for s in starts.tolist()]).to(device, non_blocking=True)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(batch[:, :-1]).logits
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step:5d}  loss {loss.item():.4f}  lr {lr_at(step):.2e}  {time.time() - t_train:.0f} s",
                  flush=True)
        if (step + 1) % 100 == 0 and step >= 199 or step == args.steps - 1:
            bpb, _ = bits_per_byte(model, held_data[:200_000], 1024, 512, device)
            print(f"  held-out bits/byte (first 200 KB): {bpb:.4f}", flush=True)
            if bpb < best[0]:
                best = (bpb, {k: v.detach().clone() for k, v in model.state_dict().items()})
    train_s = time.time() - t_train
    model.load_state_dict(best[1])
    model = model.to(torch.bfloat16)
    bpb, n = bits_per_byte(model.float(), held_data, 1024, 512, device)
    model = model.to(torch.bfloat16)
    print(f"trained {args.steps} steps in {train_s:.0f} s on {torch.cuda.get_device_name()};"
          f" held-out ({n} bytes, BF16 weights, window 1024 stride 512): {bpb:.4f} bits/byte,"
          f" perplexity per byte {2 ** bpb:.3f}", flush=True)
    model.save_pretrained(args.out, safe_serialization=True)
    # The directory strata reads: config.json without transformers' bookkeeping that varies by version.
    cfg = json.load(open(os.path.join(args.out, "config.json")))
    for k in ("transformers_version", "_name_or_path"):
        cfg.pop(k, None)
    json.dump(cfg, open(os.path.join(args.out, "config.json"), "w"), indent=2, sort_keys=True)
    for extra in ("generation_config.json",):
        p = os.path.join(args.out, extra)
        if os.path.exists(p):
            os.remove(p)

    model = model.float().eval()
    for prompt in (["Hello! Who are you?"], ["Tell me about Moses."], ["What should I pack for a long journey?"],
                   ["Hello! I am planning a week of hiking in the Alps in September. What should I pack?"]):
        ids = torch.tensor([chat_tokens([("user", p) for p in prompt])], device=device)
        print(f"USER: {prompt[-1]}", flush=True)
        for sample in (False, True):
            torch.manual_seed(args.seed)
            with torch.no_grad():
                out = model.generate(ids, max_new_tokens=300, do_sample=sample, temperature=0.7, top_p=0.9,
                                     eos_token_id=[END, EOS], pad_token_id=EOS)
            reply = bytes(t for t in out[0, ids.shape[1]:].tolist() if t < 256).decode("ascii", "replace")
            print(f"MODEL ({'T=0.7 top_p=0.9' if sample else 'greedy'}, {out.shape[1] - ids.shape[1]} tokens): {reply}",
                  flush=True)


if __name__ == "__main__":
    main()
