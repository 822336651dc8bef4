"""`recompute: blocks` on TensorFlow: each block a model part passes through BuildContext.block has its call wrapped
in tf.recompute_grad, so its activations are dropped after the forward pass and recomputed in the backward pass.

tf.recompute_grad, not keras.RematScope: RematScope exists only from Keras 3.9, and tf.recompute_grad works the
same in Keras 2 (TF 2.12-2.15, tf_keras) and Keras 3. The block's variables are created before its first
recomputed call (Recomputed.build), so none is created inside the recomputed function.
"""

from __future__ import annotations

from functools import partial

import tensorflow as tf

from backends.tensorflow import compat


class Recomputed(compat.keras.layers.Layer):
    """A block (a Keras layer or model) whose call runs under tf.recompute_grad; its weights are the block's."""

    def __init__(self, block, **kwargs):
        super().__init__(name=f"recomputed_{block.name}", **kwargs)
        self.block = block

    def build(self, input_shape):
        """Build the block first, outside any recomputed call (its variables are created here)."""
        if not self.block.built:
            self.block.build(input_shape)
        super().build(input_shape)

    def call(self, inputs, training=None):
        """The block's output; backward recomputes its activations."""
        return tf.recompute_grad(partial(_call_block, self.block, training=training))(inputs)

    def compute_output_shape(self, input_shape):
        """The block's output shape (so a functional model's construction need not trace the recomputation)."""
        return self.block.compute_output_shape(input_shape)


def _call_block(block, inputs, training):
    return block(inputs, training=training)


def recomputed(block):
    """`block` wrapped so that backward recomputes its activations (BuildContext.recompute under recompute: blocks)."""
    return Recomputed(block)


def recompute_api(recompute: str, blocks: int, block_name: str, *, under_fit: bool = False) -> str:
    """The record's api.recompute: what was wrapped (`block_name` the part's word for one block)."""
    if recompute != "blocks":
        return "none"
    if under_fit:
        return f"tf.recompute_grad around each {block_name}, inside the model's call that fit traces"
    return f"tf.recompute_grad around each of the {blocks} {block_name}s"
