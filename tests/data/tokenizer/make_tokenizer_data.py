#!/usr/bin/python3
"""Makes the tokenizer test data in this folder from corpus.txt (README.md says how to run it).

1. gpt2/vocab.json and gpt2/merges.txt: a byte-level BPE learned here on corpus.txt, in GPT-2's
   file format (the 256 byte tokens in bytes_to_unicode() order, then one token per merge, then
   <|endoftext|>).
2. spm.model (unigram, byte fallback) and spm_no_fallback.model: trained by Debian's spm_train.
3. expected_gpt2.bin and expected_spm.bin: corpus.txt's ids from the reference encoders below,
   written as llm.c token files. The GPT-2 reference follows OpenAI's encoder.py with Debian's
   python3-regex; the SentencePiece one is Debian's python3-sentencepiece, line by line, with the
   "<0x0A>" byte piece for each newline, as dstrain documents it.
"""
import collections
import json
import os
import struct
import subprocess

import regex
import sentencepiece

HERE = os.path.dirname(os.path.abspath(__file__))
GPT2_PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
MERGES = 600


def bytes_to_unicode():
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
                 list(range(ord("®"), ord("ÿ") + 1)))
    order, points = printable[:], printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            order.append(byte)
            points.append(256 + extra)
            extra += 1
    return order, {byte: chr(point) for byte, point in zip(order, points)}


def spell(piece, alphabet):
    return "".join(alphabet[byte] for byte in piece.encode("utf-8"))


def learn_bpe(text, alphabet):
    """Most frequent adjacent pair first; ties go to the larger pair (a fixed, arbitrary rule)."""
    words = {tuple(spell(piece, alphabet)): count
             for piece, count in collections.Counter(GPT2_PATTERN.findall(text)).items()}
    merges = []
    for _ in range(MERGES):
        pairs = collections.Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += count
        if not pairs:
            break
        best = max(pairs.items(), key=lambda item: (item[1], item[0]))[0]
        merges.append(best)
        joined = {}
        for word, count in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            joined[tuple(out)] = joined.get(tuple(out), 0) + count
        words = joined
    return merges


def gpt2_reference_ids(text, vocab, merges, alphabet):
    """OpenAI's encoder.py, restated."""
    ranks = {pair: rank for rank, pair in enumerate(merges)}
    ids = []
    for piece in GPT2_PATTERN.findall(text):
        word = tuple(spell(piece, alphabet))
        while len(word) > 1:
            bigram = min(set(zip(word, word[1:])), key=lambda pair: ranks.get(pair, float("inf")))
            if bigram not in ranks:
                break
            first, second = bigram
            out, i = [], 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    out.extend(word[i:])
                    break
                out.extend(word[i:j])
                i = j
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    out.append(first + second)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = tuple(out)
        ids.extend(vocab[token] for token in word)
    return ids


def spm_reference_ids(text, model_path):
    processor = sentencepiece.SentencePieceProcessor(model_file=model_path)
    newline = processor.piece_to_id("<0x0A>")
    lines = text.split("\n")
    ids = []
    for i, line in enumerate(lines):
        ids.extend(processor.encode(line))
        if i + 1 < len(lines) and processor.is_byte(newline):
            ids.append(newline)
    return ids


def write_token_file(path, ids):
    with open(path, "wb") as out:
        out.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)))
        out.write(struct.pack("<%dH" % len(ids), *ids))


def main():
    with open(os.path.join(HERE, "corpus.txt"), encoding="utf-8", newline="") as f:
        text = f.read()
    order, alphabet = bytes_to_unicode()

    merges = learn_bpe(text, alphabet)
    vocab = {alphabet[byte]: i for i, byte in enumerate(order)}
    for first, second in merges:
        vocab.setdefault(first + second, len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    os.makedirs(os.path.join(HERE, "gpt2"), exist_ok=True)
    with open(os.path.join(HERE, "gpt2", "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(HERE, "gpt2", "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        f.writelines("%s %s\n" % pair for pair in merges)
    write_token_file(os.path.join(HERE, "expected_gpt2.bin"), gpt2_reference_ids(text, vocab, merges, alphabet))

    common = ["--input=" + os.path.join(HERE, "corpus.txt"), "--model_type=unigram", "--num_threads=1",
              "--normalization_rule_name=identity", "--remove_extra_whitespaces=false", "--minloglevel=2"]
    subprocess.run(["spm_train", *common, "--model_prefix=" + os.path.join(HERE, "spm"), "--vocab_size=800",
                    "--byte_fallback=true", "--character_coverage=0.995"], check=True)
    subprocess.run(["spm_train", *common, "--model_prefix=" + os.path.join(HERE, "spm_no_fallback"),
                    "--vocab_size=300", "--character_coverage=0.98"], check=True)
    for prefix in ("spm", "spm_no_fallback"):
        os.remove(os.path.join(HERE, prefix + ".vocab"))
    write_token_file(os.path.join(HERE, "expected_spm.bin"), spm_reference_ids(text, os.path.join(HERE, "spm.model")))


if __name__ == "__main__":
    main()
