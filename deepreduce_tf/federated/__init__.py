"""Federated learning with DeepReduce compression in both directions (docs/federated.md).

    from deepreduce_tf.federated import DeepReduceStrategy, RowwiseMean, deepreduce_mod

DeepReduceStrategy wraps a Flower server strategy (FedAvg, FedProx, FedAdam,
...) and deepreduce_mod is the matching Flower client mod
(DeepReduceMod(initial_model=...) one whose clients build the initial
model, for DeepReduceStrategy(..., downlink='per_node',
initial_on_clients=True)); they need the
optional extra `pip install deepreduce_tf[federated]` (flwr[simulation]);
RowwiseMean averages the rows of embedding tables over the clients that
changed them; FedAvgTopK is FedAvg whose model moves by the top-k of the
server's accumulated update (FetchSGD's server: momentum and error
accumulation on the server, for clients that keep no residual).
ModelCodec (a whole model's update <-> one checked payload, with error
feedback) needs only TensorFlow; keras_initial_weights (the same initial
Keras model in every process, for DeepReduceMod(initial_model=...)) only
Keras.
"""
from deepreduce_tf.federated.codec import ModelCodec, PayloadError, model_crc
from deepreduce_tf.federated.initial import keras_initial_weights

_FLOWER = ("DeepReduceStrategy", "RowwiseMean", "DeepReduceMod", "deepreduce_mod",
           "RECOMMENDED", "FedAvgTopK")
__all__ = ["ModelCodec", "PayloadError", "model_crc", "keras_initial_weights", *_FLOWER]


def __getattr__(name):
    if name in _FLOWER:
        try:
            from deepreduce_tf.federated import flower, server_topk
        except ImportError as e:
            raise ImportError(f"deepreduce_tf.federated.{name} needs Flower ({e}): install the "
                              "extra, pip install 'deepreduce_tf[federated]' "
                              "(flwr[simulation]==1.41.0)") from e
        return getattr(server_topk if name == "FedAvgTopK" else flower, name)
    raise AttributeError(f"module 'deepreduce_tf.federated' has no attribute {name!r}")
