"""GPT-2-style causal language-model training: the same decoder on every framework, headline tokens/s.

The model is nanoGPT's GPT-2: pre-LayerNorm blocks with biases (LayerNorm epsilon 1e-5), learned position
embeddings, causal self-attention, a 4x MLP with GELU (tanh approximation), a final LayerNorm, the output head
tied to the token embedding, dropout 0. AdamW at lr 6e-4, betas (0.9, 0.95), epsilon 1e-8, weight decay 0.1 on
every tensor of two or more dimensions (the embeddings included, as nanoGPT's configure_optimizers), no gradient
clipping. Sizes come from a `preset` (`gpt2`: 124M, `gpt2-medium`: 350M), each overridden by an explicit
n_layer, n_head or d_model.

`weights(p, seed)` is the model's weights in one neutral layout (a dict of named numpy arrays, matrices stored
(inputs, outputs) as GPT-2's checkpoints store them), with nanoGPT's initialisation: each framework's part loads
it, and the same-function tests (tests/test_gpt_train.py) hold every pair of frameworks to the same loss on it.

FLOPs per token: the PaLM formula nanoGPT's estimate_mfu uses, 6N + 12 * n_layer * n_head * head_dim * seq_len,
N every parameter but the position embedding (the token embedding counted once, as the tied output head whose
matrix product is real work; the embedding lookups cost nothing). The attention term counts the whole T x T
score matrix: causal attention's skipped upper half is counted, as nanoGPT and PaLM count it.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from harness.workloads.base import Workload
from harness.workloads.host_inputs import host_warmup_floor
from harness.workloads.training import (
    OptimizerSpec,
    Training,
    TrainingParams,
    training_peak_precision,
    training_verdict,
)

#: The named sizes: (n_layer, n_head, d_model), as GPT-2 and nanoGPT name them.
PRESETS = {"gpt2": (12, 12, 768), "gpt2-medium": (24, 16, 1024)}

#: nanoGPT's train.py: AdamW at these hyperparameters, weight decay on the tensors of 2+ dimensions only.
LEARNING_RATE, BETAS, EPSILON, WEIGHT_DECAY = 6e-4, (0.9, 0.95), 1e-8, 0.1

#: LayerNorm's epsilon (torch's default, which nanoGPT and GPT-2 use).
LAYER_NORM_EPSILON = 1e-5


class GPTParams(TrainingParams):
    """Parameters of gpt_train: sizes from `preset`, each overridden where given; `batch_size` sequences of
    `seq_len` tokens per micro-batch."""

    preset: Literal["gpt2", "gpt2-medium"] = "gpt2"
    n_layer: int = Field(None, ge=1, le=1024)  # type: ignore[assignment]  (filled from the preset)
    n_head: int = Field(None, ge=1, le=1024)  # type: ignore[assignment]
    d_model: int = Field(None, ge=1, le=65536)  # type: ignore[assignment]
    #: GPT-2's 50,257 tokens padded to a multiple of 64, as nanoGPT pads them
    vocab_size: int = Field(50304, ge=2, le=1_000_000)
    seq_len: int = Field(1024, ge=1, le=131072)
    batch_size: int = Field(8, ge=1, le=65536)
    #: `fused`: the framework's own attention API as its users call it; `math`: softmax(QK^T/sqrt(d) + mask)V
    attention: Literal["fused", "math"] = "fused"

    @model_validator(mode="before")
    @classmethod
    def _sizes_from_preset(cls, data):
        if not isinstance(data, dict):
            return data
        preset = PRESETS.get(data.get("preset", "gpt2"))
        if preset is None:
            return data  # the field's own check names the bad preset
        filled = dict(data)
        for name, value in zip(("n_layer", "n_head", "d_model"), preset):
            if filled.get(name) is None:
                filled[name] = value
        return filled

    @model_validator(mode="after")
    def _heads_divide_width(self):
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_head ({self.n_head})")
        return self

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.n_head


def weight_shapes(p: GPTParams) -> dict[str, tuple[int, ...]]:
    """The neutral layout: every weight's name and shape, matrices (inputs, outputs), in the model's order."""
    d, shapes = p.d_model, {"wte": (p.vocab_size, p.d_model), "wpe": (p.seq_len, p.d_model)}
    for i in range(p.n_layer):
        h = f"h.{i}."
        shapes.update({
            h + "ln_1.weight": (d,), h + "ln_1.bias": (d,),
            h + "attn.c_attn.weight": (d, 3 * d), h + "attn.c_attn.bias": (3 * d,),
            h + "attn.c_proj.weight": (d, d), h + "attn.c_proj.bias": (d,),
            h + "ln_2.weight": (d,), h + "ln_2.bias": (d,),
            h + "mlp.c_fc.weight": (d, 4 * d), h + "mlp.c_fc.bias": (4 * d,),
            h + "mlp.c_proj.weight": (4 * d, d), h + "mlp.c_proj.bias": (d,),
        })
    shapes.update({"ln_f.weight": (d,), "ln_f.bias": (d,)})
    return shapes


def init_std(name: str, n_layer: int) -> float | None:
    """nanoGPT's initial standard deviation of a weight (normal, mean 0); None for LayerNorm scales (ones) and
    biases (zeros). The residual projections (c_proj) are scaled by 1/sqrt(2 * n_layer), as GPT-2's paper says."""
    if name.endswith("bias") or ".ln_" in name or name.startswith("ln_"):
        return None
    return 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02


def weights(p: GPTParams, seed: int) -> dict[str, np.ndarray]:
    """The model's initial weights in the neutral layout, float32, drawn with numpy from `seed` (nanoGPT's
    initialisation): what every framework's part loads for the same-function tests."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in weight_shapes(p).items():
        std = init_std(name, p.n_layer)
        if std is not None:
            out[name] = (rng.standard_normal(shape, dtype=np.float32) * np.float32(std))
        else:
            out[name] = (np.ones if name.endswith("weight") else np.zeros)(shape, dtype=np.float32)
    return out


def parameter_count(p: GPTParams) -> int:
    """Trainable parameters: the embeddings, every block's, the final LayerNorm's (the head is the tied wte)."""
    d = p.d_model
    return p.vocab_size * d + p.seq_len * d + p.n_layer * (12 * d * d + 13 * d) + 2 * d


def flops_parameters(p: GPTParams) -> int:
    """N of the PaLM formula: every parameter but the position embedding (nanoGPT's get_num_params)."""
    return parameter_count(p) - p.seq_len * p.d_model


def train_flops_per_token(p: GPTParams) -> float:
    """FLOPs of one token's training step, the PaLM formula: 6N + 12 * n_layer * n_head * head_dim * seq_len."""
    return 6.0 * flops_parameters(p) + 12.0 * p.n_layer * p.n_head * p.head_dim * p.seq_len


def tokens_per_step(p: GPTParams) -> float:
    """Tokens one step trains on, every micro-batch and replica (the headline's items)."""
    return float(p.batch_size * p.seq_len * p.grad_accum * p.replicas)


def synthetic_batch(p: GPTParams, seed: int, rank: int = 0, *, channels_last: bool = False, probe: bool = False,
                    batch: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Input ids (batch_size, seq_len) int64 uniform over the vocabulary from (seed, rank, batch), and their
    next-token targets (the same sequence shifted by one): the same on every framework."""
    rng = np.random.default_rng([seed, rank, batch])
    tokens = rng.integers(0, p.vocab_size, size=(p.batch_size, p.seq_len + 1), dtype=np.int64)
    return np.ascontiguousarray(tokens[:, :-1]), np.ascontiguousarray(tokens[:, 1:])


def size_name(p: GPTParams) -> str:
    """The preset's name where the sizes are the preset's, else `custom sizes`."""
    return p.preset if PRESETS[p.preset] == (p.n_layer, p.n_head, p.d_model) else "custom sizes"


def describe(p: GPTParams) -> str:
    """The model as the record's api.model names it."""
    return (f"GPT-2-style decoder ({size_name(p)}: n_layer={p.n_layer}, n_head={p.n_head}, d_model={p.d_model}, "
            f"vocab {p.vocab_size}, seq_len {p.seq_len}; pre-LayerNorm, tied head, GELU tanh, dropout 0), "
            f"{parameter_count(p):,} parameters")


GPT_TRAIN = Workload(
    name="gpt_train",
    description=("GPT-2-style causal language-model training step (AdamW) on synthetic tokens; headline tokens/s, "
                 "MFU by the PaLM formula"),
    params_model=GPTParams,
    metric="throughput",
    unit="tokens/s",
    flops_per_step=lambda p: train_flops_per_token(p) * tokens_per_step(p),
    items_per_step=tokens_per_step,
    peak_precision=training_peak_precision,
    verdict=training_verdict(parameter_count, model=size_name),
    technique_baselines={"precision": "fp32", "execution": "eager", "recompute": "none", "inputs": "device",
                         "attention": "math"},
    x_param="batch_size",
    plots=("throughput_vs_x", "memory_vs_x"),
    replicas_param="replicas",
    # the logits, seq_len x vocab_size per sequence
    largest_tensor_per_item=lambda p: p.seq_len * p.vocab_size,
    warmup_floor=host_warmup_floor,
    training=Training(
        batch=synthetic_batch,
        optimizer=lambda p: OptimizerSpec("adamw", lr=LEARNING_RATE, betas=BETAS, eps=EPSILON,
                                          weight_decay=WEIGHT_DECAY, decay="matrices"),
        parameters=parameter_count,
    ),
)
