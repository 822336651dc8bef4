"""gpt_train's Flax model part: nanoGPT's GPT-2 (harness.workloads.gpt_train) in flax.linen, which the JAX trainer
initialises from the seed and trains; each transformer block is one block (ctx.block) for `recompute: blocks`.

`attention: fused` is jax.nn.dot_product_attention(is_causal=True) at its default implementation (None: XLA's
path, or cuDNN's fused attention where JAX picks it on a GPU); JAX does not say which ran: the profile's
`attention` class names the kernel. `math` is the explicit softmax(QK^T/sqrt(d) + mask)V in jax.numpy.
Parameters stay float32; under amp_bf16 and amp_fp16 the layers compute in the precision's dtype, LayerNorm and
the loss in float32.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from harness.workloads.gpt_train import LAYER_NORM_EPSILON, describe, init_std

#: The dtype the layers compute in under each training precision (parameters stay float32).
COMPUTE_DTYPES = {"amp_bf16": jnp.bfloat16, "amp_fp16": jnp.float16}

#: The record's api.attention for each `attention` value.
ATTENTION_API = {
    "fused": ("jax.nn.dot_product_attention(is_causal=True, implementation=None), XLA's or cuDNN's as JAX picks: "
              "not reported; see the profile's attention class"),
    "math": "explicit softmax(QK^T/sqrt(d) + causal mask)V in jax.numpy (einsum, where, softmax, einsum)",
}


def causal_attention(q, k, v, fused: bool):
    """Attention of (B, T, H, D) q, k, v under a causal mask."""
    if fused:
        return jax.nn.dot_product_attention(q, k, v, is_causal=True)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * jnp.asarray(1.0 / math.sqrt(q.shape[-1]), q.dtype)
    length = q.shape[1]
    causal = jnp.tril(jnp.ones((length, length), bool))
    scores = jnp.where(causal, scores, jnp.asarray(-jnp.inf, scores.dtype))
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)


def _dense(features: int, std: float, dtype, name: str) -> nn.Dense:
    return nn.Dense(features, dtype=dtype, kernel_init=nn.initializers.normal(std), name=name)


def _norm(name: str) -> nn.LayerNorm:
    return nn.LayerNorm(epsilon=LAYER_NORM_EPSILON, dtype=jnp.float32, name=name)


class Block(nn.Module):
    """A pre-LayerNorm transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    d_model: int
    n_head: int
    n_layer: int
    fused: bool
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        B, T, C = x.shape
        proj = init_std("c_proj.weight", self.n_layer)
        qkv = _dense(3 * C, 0.02, self.dtype, "c_attn")(_norm("ln_1")(x).astype(self.dtype))
        q, k, v = (t.reshape(B, T, self.n_head, C // self.n_head) for t in jnp.split(qkv, 3, axis=-1))
        y = causal_attention(q, k, v, self.fused).reshape(B, T, C)
        x = x + _dense(C, proj, self.dtype, "attn_c_proj")(y)
        h = _dense(4 * C, 0.02, self.dtype, "c_fc")(_norm("ln_2")(x).astype(self.dtype))
        return x + _dense(C, proj, self.dtype, "mlp_c_proj")(nn.gelu(h, approximate=True))


class GPT(nn.Module):
    """Token and position embeddings, the blocks (each a Block class or its remat form), a final LayerNorm, the
    head tied to the token embedding; float32 logits."""

    blocks: tuple
    p: Any
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, idx):
        p, normal = self.p, nn.initializers.normal(0.02)
        wte = self.param("wte", normal, (p.vocab_size, p.d_model))
        wpe = self.param("wpe", normal, (p.seq_len, p.d_model))
        x = (wte[idx] + wpe[: idx.shape[1]]).astype(self.dtype)
        for i, block in enumerate(self.blocks):
            x = block(p.d_model, p.n_head, p.n_layer, p.attention == "fused", self.dtype, name=f"h_{i}")(x)
        x = _norm("ln_f")(x).astype(self.dtype)
        return jnp.einsum("btc,vc->btv", x, wte.astype(self.dtype)).astype(jnp.float32)


#: Each neutral layout's layer (after `h.{i}.`) and the Flax module that holds it.
BLOCK_LAYERS = {"ln_1": "ln_1", "attn.c_attn": "c_attn", "attn.c_proj": "attn_c_proj", "ln_2": "ln_2",
                "mlp.c_fc": "c_fc", "mlp.c_proj": "mlp_c_proj"}


def params_of(weights: dict[str, np.ndarray], n_layer: int) -> dict:
    """The Flax `params` collection holding the neutral layout's weights (Dense kernels (inputs, outputs))."""

    def layer(prefix: str, norm: bool) -> dict:
        return {"scale" if norm else "kernel": jnp.asarray(weights[f"{prefix}.weight"]),
                "bias": jnp.asarray(weights[f"{prefix}.bias"])}

    params = {"wte": jnp.asarray(weights["wte"]), "wpe": jnp.asarray(weights["wpe"]), "ln_f": layer("ln_f", True)}
    for i in range(n_layer):
        params[f"h_{i}"] = {name: layer(f"h.{i}.{neutral}", name.startswith("ln"))
                            for neutral, name in BLOCK_LAYERS.items()}
    return params


class FlaxGPTPart:
    """nanoGPT's GPT-2 in flax.linen: embeddings, pre-LayerNorm blocks (each one ctx.block), tied head."""

    def build(self, p, ctx) -> GPT:
        """The module, its blocks through ctx.block, computing in the precision's dtype."""
        blocks = tuple(ctx.block(Block) for _ in range(p.n_layer))
        return GPT(blocks, p, COMPUTE_DTYPES.get(ctx.precision, jnp.float32))

    def describe(self, p) -> str:
        """The record's api.model."""
        return describe(p) + "; harness_jax.gpt (flax.linen, nanoGPT's model)"

    def api(self, p) -> dict[str, str]:
        """The record's api entries this part decides: which attention ran."""
        return {"attention": ATTENTION_API[p.attention]}


PART = FlaxGPTPart()
