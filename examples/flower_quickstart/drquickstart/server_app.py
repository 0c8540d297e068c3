"""The ServerApp: Flower's FedAvg, wrapped by DeepReduceStrategy.

The wrapper compresses every message to the nodes and decodes every update
they send back (the configuration docs/federated.md recommends: its default).
Flower's log shows one DeepReduce line per round and one at the end (bytes
each way, against FedAvg's). The ServerApp evaluates the server's model (the
aggregate FedAvg computes) on the test split every round; the nodes' own
evaluation measures the model each node rebuilt from the compressed messages.
"""
import json
import os

from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from deepreduce_tf.federated import DeepReduceStrategy, keras_initial_weights
from drquickstart.task import MODEL_SEED, load_model, load_test_data

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    config = context.run_config
    initial = keras_initial_weights(load_model, seed=MODEL_SEED)  # the nodes build it too
    strategy = DeepReduceStrategy(FedAvg(fraction_train=config["fraction-train"]),
                                  initial_on_clients=True)
    model = load_model()
    x_test, y_test = load_test_data()

    def evaluate_server_model(server_round, arrays):
        model.set_weights(arrays.to_numpy_ndarrays())
        loss, accuracy = model.evaluate(x_test, y_test, batch_size=1000, verbose=0)
        return MetricRecord({"accuracy": accuracy, "loss": loss})

    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(initial),
                            num_rounds=config["num-server-rounds"],
                            evaluate_fn=evaluate_server_model)

    out_dir = os.path.abspath(config["out-dir"])
    os.makedirs(out_dir, exist_ok=True)
    model.set_weights(result.arrays.to_numpy_ndarrays())
    model_path = os.path.join(out_dir, "final_model.keras")
    model.save(model_path)
    accounting = {"totals": strategy.totals(), "rounds": strategy.rounds,
                  "rejected": strategy.rejected,
                  "server_accuracy": {str(r): float(m["accuracy"]) for r, m in
                                      result.evaluate_metrics_serverapp.items()}}
    accounting_path = os.path.join(out_dir, "deepreduce_bytes.json")
    with open(accounting_path, "w") as f:
        json.dump(accounting, f, indent=1, default=str)
    print(f"Saved the final model (the server's aggregate) to {model_path} and the bytes of "
          f"every round to {accounting_path}")
