"""The ClientApp: Flower's quickstart training and evaluation, plus one mod.

DeepReduceMod rebuilds the model the server sent (compressed) before train()
and evaluate() run, and compresses what train() returns (error feedback kept
in the node's state). train() and evaluate() are plain Flower functions: they
see and return dense weights.
"""
import keras
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from deepreduce_tf.federated import DeepReduceMod, keras_initial_weights
from drquickstart.task import MODEL_SEED, load_data, load_model

# initial_model: the same weights as the server's initial model (same function,
# same seed), so the server sends this node changes from it, never the model.
app = ClientApp(mods=[DeepReduceMod(
    initial_model=lambda: keras_initial_weights(load_model, seed=MODEL_SEED))])


@app.train()
def train(msg: Message, context: Context):
    keras.backend.clear_session()
    x_train, y_train, _, _ = load_data(context.node_config["partition-id"],
                                       context.node_config["num-partitions"],
                                       context.run_config["examples-per-node"])
    model = load_model(context.run_config["learning-rate"])
    model.set_weights(msg.content["arrays"].to_numpy_ndarrays())
    history = model.fit(x_train, y_train, epochs=context.run_config["local-epochs"],
                        batch_size=context.run_config["batch-size"], verbose=0)
    metrics = {"num-examples": len(x_train), "train_loss": history.history["loss"][-1],
               "train_acc": history.history["accuracy"][-1]}
    content = RecordDict({"arrays": ArrayRecord(model.get_weights()),
                          "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context):
    # The model evaluated here is the one this node rebuilt from the server's
    # compressed messages (what it trains from), not the server's aggregate:
    # the server's evaluate_fn measures that one (server_app.py).
    keras.backend.clear_session()
    _, _, x_test, y_test = load_data(context.node_config["partition-id"],
                                     context.node_config["num-partitions"],
                                     context.run_config["examples-per-node"])
    model = load_model(context.run_config["learning-rate"])
    model.set_weights(msg.content["arrays"].to_numpy_ndarrays())
    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    metrics = {"eval_loss": loss, "eval_acc": accuracy, "num-examples": len(x_test)}
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)
