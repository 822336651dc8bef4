"""A training workload's optimizer (harness.workloads.training.OptimizerSpec) as Keras's own: keras.optimizers.SGD
with momentum, or keras.optimizers.AdamW, whose `decay: matrices` leaves every weight of fewer than two dimensions
(biases, normalization scales and shifts) out of the weight decay through exclude_from_weight_decay."""

from __future__ import annotations

from backends.tensorflow import compat
from harness.workloads.training import OptimizerSpec


def keras_optimizer(spec: OptimizerSpec, variables: list, jit_compile: bool | None = False):
    """The Keras optimizer of `spec` for the model's trainable `variables` (not built yet), and the API called.

    `jit_compile`: Keras 2's own XLA compilation of the update (compat.keras_optimizer); Keras 3 takes none.
    """
    if spec.name == "sgd":
        return compat.sgd(spec.lr, spec.momentum, jit_compile)
    if spec.name != "adamw":
        raise ValueError(f"optimizer {spec.name!r} has no Keras mapping in the TensorFlow backend (sgd, adamw)")
    # Keras adds epsilon to sqrt(v) before the bias correction folds into the step size ("epsilon hat" of the
    # Adam paper), torch.optim.AdamW to sqrt(v_hat): the same update but for how far epsilon reaches
    optimizer, api = compat.keras_optimizer("AdamW", jit_compile, learning_rate=spec.lr, weight_decay=spec.weight_decay,
                                            beta_1=spec.betas[0], beta_2=spec.betas[1], epsilon=spec.eps)
    if spec.decay == "matrices":
        undecayed = [variable for variable in variables if len(variable.shape) < 2]
        # before the optimizer is built: Keras refuses it afterwards
        optimizer.exclude_from_weight_decay(var_list=undecayed)
        api += (f"; weight decay on the {len(variables) - len(undecayed)} weights of 2+ dimensions only "
                f"(exclude_from_weight_decay(var_list=the {len(undecayed)} others))")
    return optimizer, api
