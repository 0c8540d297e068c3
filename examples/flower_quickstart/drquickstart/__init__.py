"""drquickstart: Flower's TensorFlow quickstart, compressed by deepreduce_tf."""
