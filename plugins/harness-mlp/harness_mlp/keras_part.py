"""mlp_train's model in Keras, built with the Keras the run uses (BuildContext.framework: Keras 3 or tf_keras).

Imported only in a TensorFlow worker; it imports no framework itself.
"""

from __future__ import annotations


class KerasMLP:
    """`layers` hidden Dense layers of `hidden` units with ReLU, each one block, then a Dense classifier to
    `num_classes`; Keras's default initialisation (Glorot uniform weights, zero biases)."""

    def build(self, params, ctx):
        """A Sequential model, its weights created from the seed the trainer set."""
        keras = ctx.framework
        layers = [keras.Input(shape=(params.features,), name="features")]
        for index in range(params.layers):
            layers.append(ctx.block(keras.layers.Dense(params.hidden, activation="relu", name=f"hidden{index}")))
        # float32 logits under a mixed policy, as Keras's mixed-precision guide ends a model: Keras 2's fit
        # computes its loss in the logits' dtype
        layers.append(keras.layers.Dense(params.num_classes, dtype="float32", name="classifier"))
        return keras.Sequential(layers, name="mlp")


PART = KerasMLP()
