"""TensorFlow's interfaces adapted to an exchange: the per-replica state and
cross-device ops behind deepreduce_tf.distribute (replica_state), the
collective all-reduce of MultiWorkerMirroredStrategy (collective_ops), Keras
and TensorBoard hooks (keras_hooks), and the real tf_cnn_benchmarks
(tf_cnn_benchmarks, the deepreduce-tf-cnn-benchmarks command). The public
entry point is deepreduce_tf.distribute."""
