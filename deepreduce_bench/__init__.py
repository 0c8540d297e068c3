"""deepreduce-bench: the tf_cnn_benchmarks-style command line of deepreduce_tf.

    deepreduce-bench                                   # ResNet-20 on Fashion-MNIST, 2 replicas:
                                                       # uncompressed vs golomb_qsgd_dgc, one table
    deepreduce-bench --compressor=topk --index=golomb  # one run of these compression flags
    deepreduce-bench --model=ncf --data_name=movielens --eval --num_workers=2
    deepreduce-plot a.json b.json --out=compare.png

Modules:
  flags      every command-line flag, and the checks run before any work starts
             (flag values -> the run configuration and the from_params dict)
  workloads  model + data + loss + metric for resnet20, resnet50 and ncf
  runner     tf.distribute strategy setup, the training loop, codec timing,
             and the launcher of --num_workers local worker processes
  report     progress bar, summary table, JSON results, plots, comparison table
  compare    --compare: the presets, one child process per configuration
  cli        the console entry points (main, plot_main)

Importing this package does not import TensorFlow; runner and workloads do.
"""
