"""JAX's table for the profile breakdown (harness.timing.profile.Rules): XLA's kernel and op names -> classes.

Framework-free, apart from the worker-side profiler (harness_jax.profile), so that the table is checked on
real names (tests/test_profile.py) in every environment, with JAX installed or not.
"""

from __future__ import annotations

from harness.timing.profile import ATTENTION_RULE, GPU_LIBRARY_RULES, Rules

#: XLA's names first: fusions by their kind (a loop fusion is elementwise, an input fusion a reduction, as
#: one kernel fuses several HLO ops), then HLO ops, then the NVIDIA libraries'.
JAX_RULES = Rules([
    ATTENTION_RULE,
    ("comm", r"nccl|all-reduce|all-gather|reduce-scatter|collective-permute|all-to-all"),
    ("copy", r"^copy-(start|done)|memcpy"),
    ("layout", r"transpose|copy\w*_fusion|^copy(\.\d+)?$"),
    ("matmul", r"^gemm_fusion|triton_gemm|^cublas|^dot(\.\d+)?$|dot_fusion"),
    ("conv", r"^convolution|cudnn\$?conv|conv_fusion"),
    ("reduce", r"^input_\w*fusion|reduce|reduction"),
    ("elementwise", r"^loop_\w*fusion|^fusion(\.\d+|_\d+)?$|_fusion(\.\d+|_\d+)?$|^wrapped_|ynn_fusion|"
                    r"^(add|multiply|subtract|divide|maximum|minimum|exponential|rsqrt|sqrt|select|convert|negate|"
                    r"compare)(\.\d+)?$"),
    *GPU_LIBRARY_RULES,
])
