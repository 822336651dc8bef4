"""Data-parallel training on torch: the model in DistributedDataParallel, one process per replica (torchrun).

Any training workload's model is wrapped the same way; the gradients are averaged over the replicas by DDP's
all-reduce buckets, started from its autograd hooks during backward.
"""

from __future__ import annotations

from torch.nn.parallel import DistributedDataParallel

from backends.torch import compat
from harness.seam.distributed import collective_env

#: DistributedDataParallel's settings, explicit so the record states them (torch's defaults, except
#: broadcast_buffers: off, so BatchNorm's running statistics stay per replica as under tf.distribute,
#: and gradient_as_bucket_view: on, gradients are views into the all-reduce buckets, no copy).
DDP_SETTINGS = {"bucket_cap_mb": 25, "gradient_as_bucket_view": True, "static_graph": False, "broadcast_buffers": False}


#: the `optimize_ddp` option -> torch._dynamo.config.optimize_ddp (booleans: accepted by every torch with Dynamo)
OPTIMIZE_DDP = {"ddp_optimizer": True, "no_optimization": False}


def data_parallel(model, device, p, optimize_ddp: str = "ddp_optimizer"):
    """Wrap the model in DistributedDataParallel on this replica's device; the API and all-reduce settings.
    Under execution compiled, `optimize_ddp` sets torch._dynamo.config.optimize_ddp (this replica's process
    is its own: the setting reaches no other run)."""
    dev = device.torch
    ids = [dev.index] if dev.type == "cuda" else None
    wrapped = DistributedDataParallel(model, device_ids=ids, output_device=ids[0] if ids else None, **DDP_SETTINGS)
    replica = device.replica
    allreduce = {"backend": device.dist_backend, **DDP_SETTINGS,
                 "overlap": "each bucket's all-reduce starts during backward, from DDP's autograd hooks",
                 "gradients": "averaged over the replicas (sum / world_size): the mean loss over the global batch",
                 "batchnorm": "per replica (no SyncBatchNorm), as in tf.distribute"}
    if p.execution == "compiled":
        config = compat.dynamo_config()  # None without Dynamo: compiled is unsupported before this is reached
        if config is not None and hasattr(config, "optimize_ddp"):
            config.optimize_ddp = OPTIMIZE_DDP[optimize_ddp]
            if optimize_ddp == "no_optimization":
                allreduce["overlap"] = ("none: one compiled graph (optimize_ddp=False), DDP's all-reduce after the "
                                        "compiled backward")
            else:
                allreduce["overlap"] += " (Dynamo's DDPOptimizer splits the compiled graph at the bucket boundaries)"
        allreduce["dynamo_optimize_ddp"] = getattr(config, "optimize_ddp", None)
    allreduce["env"] = collective_env()
    api = (f"torch.nn.parallel.DistributedDataParallel({', '.join(f'{k}={v}' for k, v in DDP_SETTINGS.items())}), "
           f"{device.dist_backend}, {replica.world_size} processes (torchrun)")
    return wrapped, api, allreduce
