"""Learned compression: Learned Gradient Compression (communicators lgc_ps
and lgc_rar, deepreduce_tf.learned.lgc) and its autoencoder."""
