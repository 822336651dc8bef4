"""gpt_train's Keras model part: nanoGPT's GPT-2 (harness.workloads.gpt_train) as Keras layers, built with the
Keras the run uses (BuildContext.framework: Keras 3 or tf_keras); each transformer block is one block (ctx.block)
for `recompute: blocks`.

Attention. `fused` is the framework's own attention API as a Keras user calls it: Keras 3's
keras.ops.dot_product_attention(is_causal=True), which on the TensorFlow backend has no flash path (its
`flash_attention=True` raises there) and computes softmax(QK^T/sqrt(d))V in TensorFlow ops, fused or not as XLA
decides under `compiled`. Keras 2 (TF 2.12-2.15, tf_keras) has no fused attention API at all: its
layers.MultiHeadAttention computes the same explicit product inside, with its own weight layout, so under Keras 2
`fused` runs the explicit path and the record's api.attention says so. `math` is the explicit path everywhere.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from backends.tensorflow import compat
from harness.errors import Unsupported
from harness.workloads.gpt_train import LAYER_NORM_EPSILON, describe, init_std

#: The record's api.attention of the explicit path, and what each Keras's `fused` is.
MATH_API = "explicit softmax(QK^T/sqrt(d) + causal mask)V in TensorFlow ops (matmul, where, softmax, matmul)"
FUSED_KERAS3_API = ("keras.ops.dot_product_attention(is_causal=True) (Keras 3 on TensorFlow: no flash path, its "
                    "math in TensorFlow ops; fused or not as XLA decides): not reported; see the "
                    "profile's attention class")
FUSED_KERAS2_API = ("unfused (Keras 2 has no fused attention): " + MATH_API + "; Keras 2's layers.MultiHeadAttention "
                    "computes the same explicit product inside")


def attention_api(keras, attention: str) -> str:
    """What `attention` runs with this Keras."""
    if attention == "math":
        return MATH_API
    return FUSED_KERAS3_API if has_fused_attention(keras) else FUSED_KERAS2_API


def has_fused_attention(keras) -> bool:
    """Whether this Keras has keras.ops.dot_product_attention (later Keras 3 releases; never Keras 2)."""
    return hasattr(getattr(keras, "ops", None), "dot_product_attention")


def fused_unsupported_reason(keras, attention: str) -> str | None:
    """Why `attention: fused` cannot run with this Keras: a Keras 3 (it has keras.ops) from before
    keras.ops.dot_product_attention, whose users have no fused attention API to call. Keras 2 has none either,
    but its attention layer computes the explicit product: it runs that path and says so."""
    if attention == "fused" and hasattr(keras, "ops") and not has_fused_attention(keras):
        return (f"attention: fused on Keras {getattr(keras, '__version__', '3')}: this Keras 3 has no "
                "keras.ops.dot_product_attention (later Keras 3 releases do); run attention: math, or a newer Keras")
    return None


def causal_attention(q, k, v, fused_op):
    """softmax(QK^T/sqrt(d) + causal mask)V of (B, T, H, D) q, k, v; through `fused_op` where it is given."""
    if fused_op is not None:
        return fused_op(q, k, v, is_causal=True)
    q, k, v = (tf.transpose(t, [0, 2, 1, 3]) for t in (q, k, v))
    scores = tf.matmul(q, k, transpose_b=True) * tf.cast(1.0 / math.sqrt(q.shape[-1]), q.dtype)
    length = tf.shape(scores)[-1]
    causal = tf.linalg.band_part(tf.ones((length, length), tf.bool), -1, 0)
    scores = tf.where(causal, scores, tf.cast(float("-inf"), scores.dtype))
    y = tf.matmul(tf.nn.softmax(scores, axis=-1), v)
    return tf.transpose(y, [0, 2, 1, 3])


def block_layer(keras):
    """The Block layer class for this Keras (Keras 3 and tf_keras each have their own Layer base)."""

    class Block(keras.layers.Layer):
        """A pre-LayerNorm transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

        def __init__(self, d_model: int, n_head: int, n_layer: int, fused: bool, **kwargs):
            super().__init__(**kwargs)
            self.n_head = n_head
            self.fused_op = keras.ops.dot_product_attention if fused and has_fused_attention(keras) else None
            # a fresh initializer per weight: tf_keras gives an unseeded instance's every call the same values
            normal = keras.initializers.RandomNormal
            proj = init_std("c_proj.weight", n_layer)
            self.ln_1 = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name="ln_1")
            self.c_attn = keras.layers.Dense(3 * d_model, kernel_initializer=normal(stddev=0.02), name="c_attn")
            self.attn_proj = keras.layers.Dense(d_model, kernel_initializer=normal(stddev=proj), name="attn_c_proj")
            self.ln_2 = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name="ln_2")
            self.c_fc = keras.layers.Dense(4 * d_model, kernel_initializer=normal(stddev=0.02), name="c_fc")
            self.mlp_proj = keras.layers.Dense(d_model, kernel_initializer=normal(stddev=proj), name="mlp_c_proj")

        def build(self, input_shape):
            width = (None, None, input_shape[-1])
            for layer in (self.ln_1, self.c_attn, self.ln_2, self.c_fc):
                layer.build(width)
            self.attn_proj.build(width)
            self.mlp_proj.build((None, None, 4 * input_shape[-1]))
            self.built = True

        def call(self, x, training=None):
            B, T, C = tf.shape(x)[0], tf.shape(x)[1], x.shape[-1]
            q, k, v = tf.split(self.c_attn(self.ln_1(x)), 3, axis=-1)
            q, k, v = (tf.reshape(t, [B, T, self.n_head, C // self.n_head]) for t in (q, k, v))
            y = tf.reshape(causal_attention(q, k, v, self.fused_op), [B, T, C])
            x = x + self.attn_proj(y)
            return x + self.mlp_proj(tf.nn.gelu(self.c_fc(self.ln_2(x)), approximate=True))

        def compute_output_shape(self, input_shape):
            return input_shape

    return Block


def gpt_model(keras):
    """The GPT model class for this Keras."""

    class GPT(keras.Model):
        """Token and position embeddings, the blocks, a final LayerNorm, the head tied to the token embedding;
        float32 logits (as Keras's mixed-precision guide ends a model)."""

        def __init__(self, p, blocks, **kwargs):
            super().__init__(**kwargs)
            self.p, self.blocks = p, list(blocks)
            self.ln_f = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name="ln_f")

        def build(self, input_shape):
            normal = keras.initializers.RandomNormal
            self.wte = self.add_weight(name="wte", shape=(self.p.vocab_size, self.p.d_model),
                                       initializer=normal(stddev=0.02))
            self.wpe = self.add_weight(name="wpe", shape=(self.p.seq_len, self.p.d_model),
                                       initializer=normal(stddev=0.02))
            for block in self.blocks:
                block.build((None, self.p.seq_len, self.p.d_model))
            self.ln_f.build((None, self.p.seq_len, self.p.d_model))
            self.built = True

        def call(self, idx, training=None):
            wte = tf.convert_to_tensor(self.wte)
            x = tf.gather(wte, idx) + tf.convert_to_tensor(self.wpe)[: idx.shape[1]]
            for block in self.blocks:
                x = block(x, training=training)
            logits = tf.matmul(self.ln_f(x), tf.cast(wte, x.dtype), transpose_b=True)
            return tf.cast(logits, tf.float32)

    return GPT


def layers_by_name(model) -> dict[str, object]:
    """Each block's layers by the neutral layout's prefix (`h.0.attn.c_attn`), recomputed blocks unwrapped."""
    out = {"ln_f": model.ln_f}
    for i, block in enumerate(model.blocks):
        block = getattr(block, "block", block)  # a Recomputed layer holds its block as `.block`
        out.update({f"h.{i}.ln_1": block.ln_1, f"h.{i}.attn.c_attn": block.c_attn,
                    f"h.{i}.attn.c_proj": block.attn_proj, f"h.{i}.ln_2": block.ln_2,
                    f"h.{i}.mlp.c_fc": block.c_fc, f"h.{i}.mlp.c_proj": block.mlp_proj})
    return out


def load(model, weights: dict[str, np.ndarray]) -> None:
    """Assign the neutral layout's weights to the model (Dense kernels are (inputs, outputs) as stored)."""
    model.wte.assign(weights["wte"])
    model.wpe.assign(weights["wpe"])
    for prefix, layer in layers_by_name(model).items():
        is_norm = prefix.endswith(("ln_1", "ln_2", "ln_f"))
        scale, shift = (layer.gamma, layer.beta) if is_norm else (layer.kernel, layer.bias)
        scale.assign(weights[f"{prefix}.weight"])
        shift.assign(weights[f"{prefix}.bias"])


class KerasGPTPart:
    """nanoGPT's GPT-2 in Keras layers: embeddings, pre-LayerNorm blocks (each one ctx.block), tied head."""

    block_name = "Block"

    def build(self, p, ctx):
        """The model, its weights created (normal(0, 0.02), residual projections scaled) from the seeded Keras."""
        keras = ctx.framework
        reason = fused_unsupported_reason(keras, p.attention)
        if reason:
            raise Unsupported(reason)
        Block = block_layer(keras)
        fused = p.attention == "fused"
        blocks = [ctx.block(Block(p.d_model, p.n_head, p.n_layer, fused, name=f"h{i}")) for i in range(p.n_layer)]
        model = gpt_model(keras)(p, blocks, name="gpt")
        model.build((None, p.seq_len))
        return model

    def describe(self, p) -> str:
        """The record's api.model."""
        return describe(p) + "; backends.tensorflow.gpt (Keras layers, nanoGPT's model)"

    def api(self, p) -> dict[str, str]:
        """The record's api entries this part decides: which attention ran."""
        return {"attention": attention_api(compat.keras, p.attention)}


PART = KerasGPTPart()
