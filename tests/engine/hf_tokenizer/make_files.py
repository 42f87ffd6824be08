#!/usr/bin/python3
"""Writes the Hugging Face tokenizer folders the hf tokenizer tests read (tokenizer.json and
tokenizer_config.json in the layouts of GPT-2, Llama 3, Qwen2, Llama 2, Mistral and Gemma, plus one
with Digits): vocabularies and merges learned here, by plain BPE counting, from a small corpus. Nothing
is copied from a real model; the files only have the real ones' shape (pre-tokenizer, decoder,
post-processor, special tokens). Standard library only (Debian's /usr/bin/python3).
Usage: make_files.py OUT_DIR"""
import collections
import json
import os
import re
import sys

CORPUS = """The quick brown fox jumps over the lazy dog. It's the dog's bone, isn't it? They'll say we've
done what I'd do: we're here, you're there. THE DOG'S BONE ISN'T HERE, THEY'LL SAY.
Numbers: 1234567890, 2026-11-29, 3.14159 and 100000 tokens per second; 42 is the answer.
Tokenizers split text into pieces, then merge pairs of symbols: the most frequent pair first.
Hello world! Hello, world. hello there; general kenobi. Café, naïve, résumé, déjà vu, façade.
def tokenize(text):\r\n    return [piece for piece in text.split()]\r\n
    indented    lines   with     runs of spaces\t\tand tabs
Training runs on many machines; the optimizer state is partitioned across ranks.
"""

SPLIT_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+"
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def learn_merges(words, merges_wanted):
    """words: {tuple of symbols: count}. Returns the merges, most frequent pair first (ties: the
    smallest pair), each applied to the words before the next is counted."""
    words = dict(words)
    merges = []
    for _ in range(merges_wanted):
        pairs = collections.Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += count
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
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


def added(id_, content, special=True, normalized=False, lstrip=False, rstrip=False, single_word=False):
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": normalized, "special": special}


def byte_level_vocab(merges_wanted, extra_words=()):
    alphabet = bytes_to_unicode()
    words = collections.Counter()
    for piece in re.findall(SPLIT_GPT2, CORPUS):
        words[tuple(alphabet[b] for b in piece.encode())] += 1
    merges = learn_merges(words, merges_wanted)
    vocab = {alphabet[b]: i for i, b in enumerate(sorted(alphabet))}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    # Whole words with no merge path to them: only ignore_merges produces them.
    for word in extra_words:
        vocab.setdefault("".join(alphabet[b] for b in word.encode()), len(vocab))
    return vocab, merges


def byte_level_tokenizer(vocab, merges, pre_tokenizer, specials, post_processor, normalizer=None,
                         ignore_merges=False, pair_merges=False):
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": specials,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": post_processor,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": ignore_merges, "vocab": vocab,
                  "merges": [[a, b] for a, b in merges] if pair_merges else [f"{a} {b}" for a, b in merges]},
    }


def split_then_bytes(pattern):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}


def template(bos_name, bos_id):
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos_name, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos_name, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos_name, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos_name: {"id": bos_name, "ids": [bos_id], "tokens": [bos_name]}}}


BYTE_LEVEL_POST = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}


def gpt2():
    vocab, merges = byte_level_vocab(300)
    eot = len(vocab)
    vocab["<|endoftext|>"] = eot
    tok = byte_level_tokenizer(vocab, merges,
                               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                "use_regex": True},
                               [added(eot, "<|endoftext|>")], BYTE_LEVEL_POST)
    config = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "clean_up_tokenization_spaces": False,
              "tokenizer_class": "GPT2Tokenizer"}
    return tok, config


def llama3():
    vocab, merges = byte_level_vocab(320, extra_words=(" quokka", " Quokka", "ultramarine"))
    base = len(vocab)
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    specials = [added(base + i, name) for i, name in enumerate(names)]
    # Non-special added tokens with the strip flags (normalized: there is no normalizer, so raw).
    specials.append(added(base + len(names), "<tool>", special=False, lstrip=True))
    specials.append(added(base + len(names) + 1, "</tool>", special=False, rstrip=True))
    tok = byte_level_tokenizer(vocab, merges, split_then_bytes(LLAMA3_PATTERN), specials,
                               {"type": "Sequence", "processors": [
                                   {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                                    "use_regex": True},
                                   template("<|begin_of_text|>", base)]},
                               ignore_merges=True)
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
              "clean_up_tokenization_spaces": False, "tokenizer_class": "PreTrainedTokenizerFast",
              "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in specials}}
    return tok, config


def qwen2():
    vocab, merges = byte_level_vocab(280)
    base = len(vocab)
    specials = [added(base, "<|endoftext|>"), added(base + 1, "<|im_start|>"), added(base + 2, "<|im_end|>"),
                # normalized: found in the NFC text (ASCII: the ByteLevel decoder spells a non-ASCII
                # added token differently in Rust and tokenizers.js, docs/tokenizers.md)
                added(base + 3, "[ok]", special=False, normalized=True)]
    tok = byte_level_tokenizer(vocab, merges, split_then_bytes(QWEN2_PATTERN), specials, BYTE_LEVEL_POST,
                               normalizer={"type": "NFC"}, pair_merges=True)
    config = {"bos_token": None, "eos_token": "<|endoftext|>", "clean_up_tokenization_spaces": False,
              "tokenizer_class": "Qwen2Tokenizer"}
    return tok, config


def digits():
    vocab, merges = byte_level_vocab(200)
    tok = byte_level_tokenizer(vocab, merges, {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": False},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]}, [],
        None)
    return tok, {"clean_up_tokenization_spaces": False}


def spm_style(style):
    """Llama 2 (Prepend + Replace normalizers), Mistral (a Metaspace pre-tokenizer, prepend_scheme
    first) or Gemma (a Replace normalizer alone, no prefix; <bos>, <start_of_turn>): characters, byte
    fallback for the rest."""
    mark = "\u2581"
    words = collections.Counter()
    for line in CORPUS.split("\n"):
        for word in re.findall(r" ?[^ ]+| +", line.replace("\r", "")):
            words[tuple(word.replace(" ", mark))] += 1
    merges = learn_merges(words, 250)
    gemma = style == "gemma"
    bos, eos = ("<bos>", "<eos>") if gemma else ("<s>", "</s>")
    vocab = {"<unk>": 0, bos: 1, eos: 2}
    if gemma:
        vocab.update({"<pad>": 3, "<start_of_turn>": 4, "<end_of_turn>": 5})
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for ch in sorted({c for w in words for c in w}):
        vocab.setdefault(ch, len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    specials = [added(vocab[name], name) for name in vocab if name.startswith("<") and not name.startswith("<0x")]
    if style == "mistral":
        normalizer = None
        pre = {"type": "Metaspace", "replacement": mark, "prepend_scheme": "first", "split": False}
        decoder = {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Metaspace", "replacement": mark,
                                                                                "prepend_scheme": "first",
                                                                                "split": False}]}
    elif gemma:
        normalizer = {"type": "Replace", "pattern": {"String": " "}, "content": mark}
        pre = None
        decoder = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": mark}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}]}
    else:
        normalizer = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": mark},
                                                          {"type": "Replace", "pattern": {"String": " "},
                                                           "content": mark}]}
        pre = None
        decoder = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": mark}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": specials,
           "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": template(bos, 1), "decoder": decoder,
           "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                     "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]}}
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": bos, "eos_token": eos,
              "unk_token": "<unk>", "clean_up_tokenization_spaces": False, "legacy": False,
              "tokenizer_class": "GemmaTokenizer" if gemma else "LlamaTokenizer"}
    return tok, config


def main():
    out = sys.argv[1]
    for name, (tok, config) in {"gpt2": gpt2(), "llama3": llama3(), "qwen2": qwen2(), "digits": digits(),
                                "llama2": spm_style("llama2"), "mistral": spm_style("mistral"),
                                "gemma": spm_style("gemma")}.items():
        os.makedirs(os.path.join(out, name), exist_ok=True)
        with open(os.path.join(out, name, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False, indent=1)
        with open(os.path.join(out, name, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
