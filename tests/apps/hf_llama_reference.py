#!/usr/bin/python3
"""Hugging Face's LlamaForCausalLM written out in PyTorch, for the tests: the weights of a folder
(config.json with model.safetensors or an index's shards, read by hf_gpt2_reference.read_weights with
struct and numpy) loaded by load_state_dict(strict=True) into modules named as transformers names
them. The equations are modeling_llama's: LlamaRMSNorm, rotary embeddings applied with rotate_half,
grouped-query attention through repeat_kv, the SwiGLU MLP, the head tied to embed_tokens when
tie_word_embeddings. tests/engine/llama_test.cpp checks the built-in Llama's logits and gradients
against these modules too.

  hf_llama_reference.py loss DIR --tokens FILE             rows of T+1 int64 tokens, raw little-endian
  hf_llama_reference.py loss DIR --text FILE --seed S --step N --batch B
(--block-size T: rows of T + 1 tokens; default max_position_embeddings) prints the mean next-token
cross entropy (full precision); --logits FILE also writes the logits, raw little-endian float32.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_gpt2_reference import loss_command, read_weights  # noqa: E402


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(hidden, n_rep):
    b, kv, t, d = hidden.shape
    return hidden[:, :, None, :, :].expand(b, kv, n_rep, t, d).reshape(b, kv * n_rep, t, d)


def rotary_cos_sin(c, T):
    """LlamaRotaryEmbedding: cos and sin of position times theta^(-2i/D), each half repeated."""
    D = c["hidden_size"] // c["num_attention_heads"]
    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    freqs = torch.outer(torch.arange(T).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


class LlamaRMSNorm(torch.nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class LlamaAttention(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        C, self.H, self.KV = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        self.D = C // self.H
        self.q_proj = torch.nn.Linear(C, self.H * self.D, bias=False)
        self.k_proj = torch.nn.Linear(C, self.KV * self.D, bias=False)
        self.v_proj = torch.nn.Linear(C, self.KV * self.D, bias=False)
        self.o_proj = torch.nn.Linear(self.H * self.D, C, bias=False)

    def forward(self, h, cos, sin):
        B, T, C = h.shape
        q = self.q_proj(h).view(B, T, self.H, self.D).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.KV, self.D).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.KV, self.D).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, self.H // self.KV), repeat_kv(v, self.H // self.KV)
        mask = torch.full((T, T), float("-inf")).triu(1)
        w = F.softmax(torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.D) + mask, dim=-1, dtype=torch.float32)
        return self.o_proj(torch.matmul(w, v).transpose(1, 2).reshape(B, T, C))


class LlamaMLP(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        C, I = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = torch.nn.Linear(C, I, bias=False)
        self.up_proj = torch.nn.Linear(C, I, bias=False)
        self.down_proj = torch.nn.Linear(I, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = LlamaAttention(c)
        self.post_attention_layernorm = LlamaRMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = LlamaMLP(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.embed_tokens = torch.nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = torch.nn.ModuleList([LlamaDecoderLayer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = LlamaRMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, tokens):
        cos, sin = rotary_cos_sin(self.config, tokens.shape[1])
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class LlamaForCausalLM(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.tied = c.get("tie_word_embeddings", False)
        self.model = LlamaModel(c)
        if not self.tied:
            self.lm_head = torch.nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)

    def forward(self, tokens):
        head = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        return F.linear(self.model(tokens), head)


def hf_config(c):
    """config.json's keys with LlamaConfig's defaults filled in."""
    c = dict(c)
    c.setdefault("num_key_value_heads", c["num_attention_heads"])
    c.setdefault("rms_norm_eps", 1e-6)
    c.setdefault("rope_theta", 10000.0)
    return c


def load_model(folder):
    config = json.load(open(os.path.join(folder, "config.json")))
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama", config
    assert config["hidden_act"] == "silu" and config.get("rope_scaling") is None, config
    model = LlamaForCausalLM(hf_config(config))
    weights = {name: torch.from_numpy(array.copy()) for name, array in read_weights(folder).items()}
    if model.tied:
        weights.pop("lm_head.weight", None)
    model.load_state_dict(weights, strict=True)
    return model.eval()


def main():
    loss_command(load_model, lambda model: model.model.config["max_position_embeddings"], "max_position_embeddings")


if __name__ == "__main__":
    sys.exit(main())
