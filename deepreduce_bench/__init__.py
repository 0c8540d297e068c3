"""deepreduce-bench: the tf_cnn_benchmarks-style command line over deepreduce_tf.

    deepreduce-bench                                   # ResNet-20 on Fashion-MNIST, 2 replicas:
                                                       # uncompressed vs golomb_qsgd_dgc, one table
    deepreduce-bench --compressor=topk --index=golomb  # one run of these compression flags
    deepreduce-bench --model=ncf --data_name=movielens --eval --num_workers=2
    deepreduce-plot a.json b.json --out=compare.png

Modules, in layers (a module imports only those above it; workloads and
models, which import TensorFlow, are imported by runner when it trains):
  presets    --compare's configurations, declared once
  report     progress bar, summary table, JSON results, plots, comparison table
  movielens  MovieLens-100K: fetch, NCF leave-one-out split, HR@10 / NDCG@10
  data       Fashion-MNIST: IDX loader, its sources, synthetic images; fetch_all
  flags      every command-line flag, and the checks run before any work starts
             (flag values -> the run configuration and the from_params dict)
  models     ResNet-20, ResNet-50 v1.5, NeuMF (Keras)
  workloads  model + data + loss + metric for resnet20, resnet50 and ncf
  runner     tf.distribute strategy setup, the training loop, codec timing,
             and the launcher of --num_workers local worker processes
  compare    --compare: one child process per configuration, one table and plot
  cli        the console entry points (main, plot_main)

Importing this package does not import TensorFlow; workloads and models do.
"""
