#!/usr/bin/python3
"""An independent reader of Hugging Face GPT-2 weights and the model they describe, for the tests.

The safetensors files are read with struct, json and numpy (model.safetensors, or the shards of
model.safetensors.index.json); the model is GPT-2's equations in PyTorch (transformers'
GPT2LMHeadModel: Conv1D weights [in, out], GELU's tanh approximation, LayerNorm eps from
config.json, the head tied to wte), its parameters named as transformers names them and loaded with
load_state_dict(strict=True). Batches of dstrain's text data are drawn as its CorpusSource draws
them (SplitMix64, engine/data/split_mix.hpp).

  hf_gpt2_reference.py loss DIR --tokens FILE             rows of T+1 int64 tokens, raw little-endian
  hf_gpt2_reference.py loss DIR --text FILE --seed S --step N --batch B
(--block-size T: rows of T + 1 tokens; default n_positions) prints the mean next-token cross entropy
(full precision); --logits FILE also writes the logits, raw little-endian float32.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1"}


def read_safetensors_file(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        if entry["dtype"] == "BF16":
            bits = np.frombuffer(data[begin:end], dtype="<u2").astype("<u4") << 16
            array = bits.view("<f4")
        else:
            array = np.frombuffer(data[begin:end], dtype=DTYPES[entry["dtype"]])
        tensors[name] = array.reshape(entry["shape"]).astype(np.float32)
    return tensors


def read_weights(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors_file(os.path.join(folder, "model.safetensors"))
    weight_map = json.load(open(index))["weight_map"]
    tensors = {}
    for file in sorted(set(weight_map.values())):
        for name, array in read_safetensors_file(os.path.join(folder, file)).items():
            if weight_map.get(name) == file:
                tensors[name] = array
    return tensors


class Conv1D(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(n_in, n_out))
        self.bias = torch.nn.Parameter(torch.empty(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c["n_head"]
        self.c_attn = Conv1D(c["n_embd"], 3 * c["n_embd"])
        self.c_proj = Conv1D(c["n_embd"], c["n_embd"])

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        scores = q @ k.transpose(-1, -2) / math.sqrt(C // self.n_head)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


class MLP(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = Conv1D(c["n_embd"], 4 * c["n_embd"])
        self.c_proj = Conv1D(4 * c["n_embd"], c["n_embd"])

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        eps = c.get("layer_norm_epsilon", 1e-5)
        self.ln_1 = torch.nn.LayerNorm(c["n_embd"], eps=eps)
        self.attn = Attention(c)
        self.ln_2 = torch.nn.LayerNorm(c["n_embd"], eps=eps)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2LMHeadModel(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = torch.nn.ModuleDict(dict(
            wte=torch.nn.Embedding(c["vocab_size"], c["n_embd"]),
            wpe=torch.nn.Embedding(c["n_positions"], c["n_embd"]),
            h=torch.nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
            ln_f=torch.nn.LayerNorm(c["n_embd"], eps=c.get("layer_norm_epsilon", 1e-5))))

    def forward(self, idx):
        t = self.transformer
        x = t.wte(idx) + t.wpe(torch.arange(idx.shape[1]))
        for block in t.h:
            x = block(x)
        return t.ln_f(x) @ t.wte.weight.T  # lm_head, tied


def load_model(folder):
    config = json.load(open(os.path.join(folder, "config.json")))
    assert config["architectures"] == ["GPT2LMHeadModel"] and config["model_type"] == "gpt2", config
    assert config["activation_function"] == "gelu_new" and config.get("tie_word_embeddings", True), config
    model = GPT2LMHeadModel(config)
    weights = {name: torch.from_numpy(array.copy()) for name, array in read_weights(folder).items()
               if name != "lm_head.weight"}
    model.load_state_dict(weights, strict=True)
    return model.eval()


MASK = (1 << 64) - 1


def splitmix(state):
    """SplitMix64: (next state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def text_batch(path, block_size, seed, step, count):
    tokens = np.fromfile(path, dtype=np.uint8).astype(np.int64)
    length = block_size + 1
    rows = []
    for index in range(count):
        h = splitmix(seed)[1]
        h = splitmix(h ^ step)[1]
        sample = splitmix(h ^ index)[1]
        start = splitmix(sample)[1] % (len(tokens) - length + 1)
        rows.append(tokens[start:start + length])
    return np.stack(rows)


def loss(model, rows):
    rows = torch.from_numpy(np.ascontiguousarray(rows))
    with torch.no_grad():
        logits = model(rows[:, :-1])
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1)).item()


def loss_command(load_model, default_block_size, block_size_name):
    """The `loss` command of this reference and hf_llama_reference.py: the loss of the folder's model
    (and, asked, its logits) on rows given as tokens or drawn from a text as the trainer draws them."""
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["loss"])
    parser.add_argument("folder")
    parser.add_argument("--tokens")
    parser.add_argument("--text")
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--step", type=int, default=0)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--logits", help="also write the logits [rows, T, vocab] here, raw little-endian float32")
    parser.add_argument("--block-size", type=int, help=f"T of the rows (default: {block_size_name})")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = load_model(args.folder)
    block_size = args.block_size or default_block_size(model)
    if args.tokens:
        rows = np.fromfile(args.tokens, dtype="<i8").reshape(-1, block_size + 1)
    else:
        rows = text_batch(args.text, block_size, args.seed, args.step, args.batch)
    if args.logits:
        with torch.no_grad():
            model(torch.from_numpy(np.ascontiguousarray(rows[:, :-1]))).numpy().astype("<f4").tofile(args.logits)
    print(repr(loss(model, rows)))


def main():
    loss_command(load_model, lambda model: model.transformer.wpe.weight.shape[0], "n_positions")


if __name__ == "__main__":
    sys.exit(main())
