"""gpt_train's torch model part: nanoGPT's GPT-2 (harness.workloads.gpt_train), which the torch trainer (train.py)
runs like any training workload's model; each transformer block is one block (ctx.block) for `recompute: blocks`.

`attention: fused` is torch.nn.functional.scaled_dot_product_attention(is_causal=True), as nanoGPT calls it;
torch picks its kernel (flash, memory-efficient, cuDNN or the math fallback) and does not say which: the
profile's `attention` class names the kernel that ran. `math` is the explicit softmax(QK^T/sqrt(d) + mask)V.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from harness.workloads.gpt_train import LAYER_NORM_EPSILON, describe, init_std
from harness.workloads.training import BuildContext

#: The record's api.attention for each `attention` value.
ATTENTION_API = {
    "fused": ("torch.nn.functional.scaled_dot_product_attention(is_causal=True); torch picks the kernel (flash, "
              "memory-efficient, cuDNN or math): not reported; see the profile's attention class"),
    "math": "explicit softmax(QK^T/sqrt(d) + causal mask)V in torch ops (matmul, masked_fill, softmax, matmul)",
}


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: one (d, 3d) projection to q, k, v, attention, an output projection."""

    def __init__(self, d_model: int, n_head: int, seq_len: int, fused: bool):
        super().__init__()
        self.n_head, self.fused = n_head, fused
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        if not fused:
            mask = torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))
            self.register_buffer("mask", mask.view(1, 1, seq_len, seq_len), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = F.softmax(att.masked_fill(~self.mask[:, :, :T, :T], float("-inf")), dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    """A pre-LayerNorm transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, d_model: int, n_head: int, seq_len: int, fused: bool):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model, eps=LAYER_NORM_EPSILON)
        self.attn = CausalSelfAttention(d_model, n_head, seq_len, fused)
        self.ln_2 = nn.LayerNorm(d_model, eps=LAYER_NORM_EPSILON)
        self.mlp = nn.Sequential()
        self.mlp.add_module("c_fc", nn.Linear(d_model, 4 * d_model))
        self.mlp.add_module("gelu", nn.GELU(approximate="tanh"))
        self.mlp.add_module("c_proj", nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Token and position embeddings, the blocks, a final LayerNorm, and the head tied to the token embedding."""

    def __init__(self, p, blocks: list[nn.Module]):
        super().__init__()
        self.wte = nn.Embedding(p.vocab_size, p.d_model)
        self.wpe = nn.Embedding(p.seq_len, p.d_model)
        self.h = nn.ModuleList(blocks)
        self.ln_f = nn.LayerNorm(p.d_model, eps=LAYER_NORM_EPSILON)

    def forward(self, idx):
        positions = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # the tied head: logits (B, T, vocab)


def neutral_names(model: GPT) -> dict[str, nn.Parameter]:
    """The model's parameters by their names in the neutral layout (gpt_train.weight_shapes)."""
    out = {}
    for name, param in model.named_parameters():
        name = name.replace(".block.", ".")  # a CheckpointedBlock holds its block as `.block`
        out[name.split(".")[0] if name.startswith(("wte.", "wpe.")) else name] = param
    return out


def load(model: GPT, weights: dict[str, np.ndarray]) -> None:
    """Copy the neutral layout's weights into the model (Linear weights transposed to torch's (out, in))."""
    with torch.no_grad():
        for name, param in neutral_names(model).items():
            array = torch.from_numpy(weights[name])
            param.copy_(array.t() if param.dim() == 2 and name not in ("wte", "wpe") else array)


def initialise(model: GPT, n_layer: int) -> None:
    """nanoGPT's initialisation from torch's seeded generator: normal(0, 0.02), residual projections scaled by
    1/sqrt(2 * n_layer), zero biases, unit LayerNorm scales."""
    with torch.no_grad():
        for name, param in neutral_names(model).items():
            std = init_std(name, n_layer)
            if std is not None:
                param.normal_(0.0, std)
            elif name.endswith("bias"):
                param.zero_()
            else:
                param.fill_(1.0)


class GPTPart:
    """nanoGPT's GPT-2 in torch.nn: embeddings, pre-LayerNorm blocks (each one ctx.block), tied head."""

    block_name = "Block"

    def build(self, p, ctx: BuildContext) -> GPT:
        """The model, initialised as nanoGPT does from the generator the trainer seeded."""
        fused = p.attention == "fused"
        blocks = [ctx.block(Block(p.d_model, p.n_head, p.seq_len, fused)) for _ in range(p.n_layer)]
        model = GPT(p, blocks)
        initialise(model, p.n_layer)
        return model

    def describe(self, p) -> str:
        """The record's api.model."""
        return describe(p) + "; backends.torch.gpt (nanoGPT's model)"

    def api(self, p) -> dict[str, str]:
        """The record's api entries this part decides: which attention ran."""
        return {"attention": ATTENTION_API[p.attention]}


PART = GPTPart()
