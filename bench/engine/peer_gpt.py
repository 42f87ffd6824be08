"""dstrain's built-in GPT (engine/models/src/gpt*.cpp) in PyTorch, op for op, for the peers that
benchmarks measure dstrain against: bench/engine/ddp_peer.py (DDP on CPUs) and bench/gpu/torch_peer.py
(PyTorch's own loop on a GPU). Learned positions, pre-LayerNorm blocks with biases, the same
attention (matmul, causal mask, softmax), tanh GELU, the head tied to the token embedding, GPT-2
initialisation. Tensors made inside forward follow the input's device.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, n_embd, n_head, n_layer):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.attn_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.mlp_proj = nn.Linear(4 * n_embd, n_embd)
        residual_std = 0.02 / math.sqrt(2 * n_layer)
        for linear, std in ((self.c_attn, 0.02), (self.attn_proj, residual_std), (self.c_fc, 0.02),
                            (self.mlp_proj, residual_std)):
            nn.init.normal_(linear.weight, 0.0, std)
            nn.init.zeros_(linear.bias)

    def attention(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(C, 2)
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in (q, k, v))
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(future, float("-inf")).softmax(-1)
        return self.attn_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        h = x + self.attention(self.ln_1(x))
        return h + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(h)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, block, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block, n_embd)
        nn.init.normal_(self.wte.weight, 0.0, 0.02)
        nn.init.normal_(self.wpe.weight, 0.0, 0.02)
        self.h = nn.ModuleList(Block(n_embd, n_head, n_layer) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.size(1), device=tokens.device))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)
