"""python -m deepreduce_bench: the same as deepreduce-bench."""
from deepreduce_bench.cli import main

if __name__ == "__main__":
    main()
