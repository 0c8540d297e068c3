"""The deployment test's ServerApp: DeepReduceStrategy(FedAvg) over 3 nodes;
writes the accounting and the CRCs of the models the clients trained from."""
import json
import os

import numpy as np
from flwr.app import ArrayRecord
from flwr.serverapp import ServerApp
from flwr.serverapp.strategy import FedAvg

from deepreduce_tf.federated import DeepReduceStrategy, model_crc

SHAPES = [(400, 60), (60,), (60, 10), (10,)]
PARAMS = {"compressor": "topk", "compress_ratio": 0.1, "deepreduce": "both",
          "index": "golomb", "value": "qsgd"}
app = ServerApp()


@app.main()
def main(grid, context):
    out_path = str(context.run_config["out"])
    strategy = DeepReduceStrategy(FedAvg(fraction_train=1.0, min_train_nodes=3,
                                         min_available_nodes=3, fraction_evaluate=0.0), PARAMS,
                                  downlink="versions")
    crcs = []
    aggregate = strategy.strategy.train_metrics_aggr_fn

    def metrics(contents, key):
        crcs.append(sorted(int(c["metrics"]["crc"]) for c in contents))
        return aggregate(contents, key)

    strategy.strategy.train_metrics_aggr_fn = metrics
    rng = np.random.default_rng(0)
    init = [rng.normal(size=s).astype(np.float32) for s in SHAPES]
    strategy.start(grid=grid, initial_arrays=ArrayRecord(init),
                   num_rounds=int(context.run_config["num-rounds"]))
    out = {"totals": strategy.totals(), "rounds": strategy.rounds,
           "rejected": strategy.rejected, "crcs": crcs}
    with open(out_path + ".tmp", "w") as f:
        json.dump(out, f, default=str)
    os.replace(out_path + ".tmp", out_path)  # a reader never sees half a file
