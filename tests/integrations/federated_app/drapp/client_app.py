"""The deployment test's ClientApp: one noisy step per round, DeepReduce's mod."""
import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from deepreduce_tf.federated import deepreduce_mod, model_crc

app = ClientApp(mods=[deepreduce_mod])


@app.train()
def train(msg, context):
    received = msg.content["arrays"].to_numpy_ndarrays()
    rng = np.random.default_rng(context.node_id % 1000)
    local = [w - 0.1 * rng.normal(size=w.shape).astype(np.float32) for w in received]
    return Message(RecordDict({"arrays": ArrayRecord(local), "metrics": MetricRecord(
        {"num-examples": 10, "crc": model_crc(received) % 1000003})}), reply_to=msg)
