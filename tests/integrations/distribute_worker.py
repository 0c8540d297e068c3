"""One worker of a MultiWorkerMirroredStrategy job, for
tests/integrations/test_distribute.py.

    python distribute_worker.py SPEC_JSON

SPEC_JSON: {"task": i, "ports": [...], "params": {...}, "mode": "loop" | "fit",
            "steps": N, "out": "path.npz", "eager": false, "embedding": false}

mode "loop": a custom training loop (Keras 3 model, Keras 3 optimizer) in a
tf.function (or eagerly); mode "fit": tf_keras model.fit (the environment
must set TF_USE_LEGACY_KERAS=1). Writes every trainable variable, the byte
counters and the losses to `out`. Run it with a cwd outside the repository
(the installed deepreduce_tf must be imported, not the source tree).
"""
import json
import os
import sys


def main():
    spec = json.loads(sys.argv[1])
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{p}" for p in spec["ports"]]},
        "task": {"type": "worker", "index": spec["task"]}})
    import numpy as np
    import tensorflow as tf

    from deepreduce_tf import distribute as drd

    strategy = drd.multi_worker_strategy(spec["params"])
    ops = drd.get_ops(strategy)
    rng = np.random.RandomState(100 + spec["task"])  # every worker has its own data
    steps = spec["steps"]
    losses = []
    if spec["mode"] == "fit":
        import tf_keras as keras  # TF_USE_LEGACY_KERAS=1 makes tf.keras this too

        with strategy.scope():
            model = keras.Sequential([keras.layers.Dense(48, activation="relu",
                                                         input_shape=(32,)),
                                      keras.layers.Dense(4)])
            model.compile(optimizer=keras.optimizers.SGD(0.05),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x = rng.randn(steps * 16, 32).astype("float32")
        y = (x[:, 0] > 0).astype("int32") * 2 + (x[:, 1] > 0).astype("int32")
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        cb = drd.BytesCallback(ops)
        hist = model.fit(ds.with_options(options), epochs=1, verbose=0, callbacks=[cb])
        losses = hist.history["loss"]
        weights = [v.numpy() for v in model.trainable_variables]
        batch_logs = cb.history
    else:
        import keras

        with strategy.scope():
            layers = [keras.Input((32,))]
            if spec.get("embedding"):
                layers = [keras.Input((3,), dtype="int32"), keras.layers.Embedding(500, 16),
                          keras.layers.Flatten()]
            model = keras.Sequential(layers + [keras.layers.Dense(48, activation="relu"),
                                               keras.layers.Dense(4)])
            opt = keras.optimizers.SGD(0.05)
            opt.build(model.trainable_variables)

        def step(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        def train(x, y):
            return strategy.run(step, args=(x, y))

        if not spec.get("eager"):
            train = tf.function(train)
        for _ in range(steps):
            if spec.get("embedding"):
                x = rng.randint(0, 500, size=(16, 3)).astype("int32")
                y = (x[:, 0] % 4).astype("int32")
            else:
                x = rng.randn(16, 32).astype("float32")
                y = ((x[:, 0] > 0) * 2 + (x[:, 1] > 0)).astype("int32")
            loss = train(tf.constant(x), tf.constant(y))
            losses.append(float(strategy.experimental_local_results(loss)[0]))
        weights = [v.numpy() for v in model.trainable_variables]
        batch_logs = []
    lgc_state = {}
    if ops.compressors and ops.communicator.name.startswith("lgc"):
        # Learned Gradient Compression: its autoencoder and counts
        lgc = ops.compressors[0].communicator_state
        lgc_state = {"lgc_weights": lgc.autoencoder.flat_weights().numpy(),
                     "lgc_adam_t": int(lgc.autoencoder.adam_t.numpy()),
                     "lgc_exchanges": [int(v.numpy())
                                       for v in ops.compressors[0].steps.values()]}
    step_bytes = ops.step_bytes()
    totals = ops.totals()
    np.savez(spec["out"], *weights, losses=np.array(losses),
             step_sent=step_bytes["sent_bytes"], step_dense=step_bytes["dense_bytes"],
             total_sent=totals["sent_bytes"], total_dense=totals["dense_bytes"],
             exchanges=totals["steps"], collective=ops.collective_bytes(),
             num_weights=len(weights),
             batch_sent=np.array([r["sent_bytes"] for r in batch_logs], np.int64), **lgc_state)


if __name__ == "__main__":
    main()
