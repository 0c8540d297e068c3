"""The same initial Keras model on the server and on every client, without
seeding the process globally.

A server with DeepReduceStrategy(..., initial_on_clients=True) sends a node
it never messaged a payload over the initial model instead of the model
itself; the node's DeepReduceMod(initial_model=...) must then build exactly
that model (its CRC is checked). Keras 3 draws the seed of every unseeded
initializer from Python's `random` module when the layer is made
(keras.random.make_default_seed), so two processes build the same weights
when that module is in the same state while they build the model. Seeding
it (or keras.utils.set_random_seed) for the whole process would also fix
every later draw: each client's shuffling and dropout would repeat the
others'. keras_initial_weights seeds it only while the model is built and
then puts back the state it found.

Keras 2 (tf_keras) draws its initial weights from TensorFlow's global
random state instead: there, build the model after
tf.keras.utils.set_random_seed(seed) on both sides, or ship the initial
weights with the app (np.savez) and load them on both sides.
"""
import random

import numpy as np


def keras_initial_weights(build_model, seed=0):
    """build_model() -> a Keras 3 model (or its list of weight arrays); returns
    the model's weights as numpy arrays, the same in every process that calls
    it with the same function and seed. Python's `random` and NumPy's global
    generator are seeded for the call only and restored afterwards, whatever
    build_model raises.

    Server: ArrayRecord(keras_initial_weights(load_model)) as initial_arrays.
    Client: DeepReduceMod(initial_model=lambda: keras_initial_weights(load_model)).
    """
    if not callable(build_model) or hasattr(build_model, "get_weights"):  # a model is callable
        raise TypeError("keras_initial_weights takes the function that builds the model "
                        f"(e.g. load_model), got {type(build_model).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        random.seed(seed)
        np.random.seed(seed % 2 ** 32)
        model = build_model()
        weights = model.get_weights() if hasattr(model, "get_weights") else model
        return [np.array(w) for w in weights]
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
