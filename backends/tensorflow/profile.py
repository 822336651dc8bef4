"""TensorFlow's profiler for the profile breakdown (harness.timing.profile): a few steps after the timed blocks
under tf.profiler.experimental, its XSpace (`.xplane.pb`) read with the protobuf definitions TensorFlow
ships (harness.timing.xspace chooses the spans).

On a GPU the spans are the kernels, copies and sets of the GPU's streams; on the CPU, TensorFlow's ops
(`name:Type` events) and XLA's HLO ops on the host's threads, named by their type.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import tensorflow as tf

from backends.tensorflow import compat
from harness.timing import xspace
from harness.timing.profile import ATTENTION_RULE, GPU_LIBRARY_RULES, Capture, Rules
from harness.timing.xspace import XEvent, XSpaceProfiler, newest_xspace

#: The annotation (a TraceMe) around the profiled steps: its span on the host plane is the window.
WINDOW = "harness.profiled_steps"

#: TensorFlow's and XLA's names first, then the NVIDIA libraries'. XLA's fusions are classed by their kind
#: (a loop fusion is elementwise, an input fusion a reduction), as one kernel fuses several ops.
TF_RULES = Rules([
    ATTENTION_RULE,
    ("comm", r"collective|ncclallreduce"),
    ("copy", r"^_(send|recv)$|_host(send|recv)|copytodevice|memcpy"),
    ("layout", r"transpose_fusion|copy\w*_fusion|^(loop|input)_\w*transpose|swapdimension|shuffleintensor3|"
               r"^transpose$|dataformat"),
    ("matmul", r"^gemm_fusion|triton_gemm|^cublas"),
    ("reduce", r"^input_\w*fusion|reduce\w*fusion|biasgrad"),
    ("elementwise", r"^loop_\w*fusion|^fusion(\.\d+|_\d+)?$|_fusion(\.\d+|_\d+)?$|^wrapped_"),
    ("norm", r"batchnorm"),
    ("conv", r"conv2d|conv3d|depthwiseconv|_fusedconv"),
    ("matmul", r"matmul|einsum"),
    ("reduce", r"^(sum|mean|max|min|prod)$|softmax|crossentropy|pool|argmax|l2loss"),
    # TensorFlow's generated GPU kernels for its element-wise ops (`Mul_GPU_DT_FLOAT_DT_FLOAT_kernel`)
    ("elementwise", r"^[a-z0-9]+_gpu_dt_\w*kernel$"),
    ("elementwise", r"^(addv2|add|addn|mul|sub|realdiv|relu|relugrad|cast|biasadd|square|sqrt|rsqrt|neg|maximum|"
                    r"minimum|select\w*|sigmoid|tanh|exp|log|pow|oneslike|zeroslike|fill|\w*variableop)$|"
                    r"resourceapply|applygradient|apply\w*kernel|bias(nhwc|nchw)"),
    *GPU_LIBRARY_RULES,
])


def xplane_module():
    """TensorFlow's XSpace protobuf module: under tensorflow.tsl from TF 2.12 (2.16+: only there), under
    tensorflow.core.profiler in the older layout."""
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
    except ImportError:  # TF builds that keep it only in the older place
        from tensorflow.core.profiler.protobuf import xplane_pb2
    return xplane_pb2


#: The eager runtime's event around one op it runs on the calling thread (`EagerLocalExecute: Conv2D`): on the
#: CPU the op's kernel runs inside it, so it is the eager op's span. A tf.function's call is one too
#: (`__inference_...`, `StatefulPartitionedCall`): its ops have events of their own and it is left out.
EAGER_OP = "EagerLocalExecute: "
FUNCTION_CALL = re.compile(r"^(__inference_|__forward_|__backward_)|PartitionedCall$")


def _kind(plane, metadata, event) -> str:
    """A host event's op kind: XLA's `hlo_op` stat, TensorFlow's op type (the `name:Type` events of a graph's
    ops), or the op of an eager op's event."""
    for stat in event.stats:
        if plane.stat_metadata[stat.metadata_id].name == "hlo_op":
            return stat.str_value or metadata.name
    if metadata.display_name and ":" in metadata.name:
        return metadata.display_name
    if metadata.name.startswith(EAGER_OP):
        op = metadata.name[len(EAGER_OP):]
        return "" if FUNCTION_CALL.search(op) else op
    return ""


def read_xspace(path: str) -> list[XEvent]:
    """Every event of an `.xplane.pb` file, its start on the host's clock in ns."""
    space = xplane_module().XSpace()
    with open(path, "rb") as fh:
        space.ParseFromString(fh.read())
    out = []
    for plane in space.planes:
        host = plane.name == "/host:CPU"
        for line in plane.lines:
            for event in line.events:
                metadata = plane.event_metadata[event.metadata_id]
                out.append(XEvent(plane.name, line.display_name or line.name, metadata.name,
                                  line.timestamp_ns + event.offset_ps / 1e3, event.duration_ps / 1e3,
                                  _kind(plane, metadata, event) if host else ""))
    return out


def profiled(step: Callable[[], Any], sync: Callable[[], None], steps: int, logdir: str) -> str:
    """Run `steps` steps under TensorFlow's profiler inside the window annotation, the devices waited for
    before it closes; the XSpace file it wrote."""
    tf.profiler.experimental.start(logdir)
    try:
        with tf.profiler.experimental.Trace(WINDOW):
            for _ in range(steps):
                step()
            sync()
    finally:
        tf.profiler.experimental.stop()
    return newest_xspace(logdir, "TensorFlow's profiler")


PROFILER = XSpaceProfiler(name="tf.profiler.experimental", profiled=profiled, read=read_xspace, window=WINDOW,
                          host_ops="TensorFlow and XLA ops on the host's threads", rules=TF_RULES)


def capture(step: Callable[[], Any], gpu_index: int | None, steps: int, trace_dir: str | None) -> Capture:
    """One step, then `steps` under the profiler; the breakdown's capture (GPU `gpu_index`'s streams, or the
    host's ops where it is None). Raises where the profiler cannot run or saw nothing."""
    sync, _ = compat.device_sync()
    return xspace.capture(PROFILER, step, sync, gpu_index, steps, trace_dir)
