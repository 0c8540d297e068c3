"""python -m deepreduce_tf.benchmark: the same as deepreduce-bench."""
from deepreduce_tf.benchmark.cli import main

if __name__ == "__main__":
    main()
