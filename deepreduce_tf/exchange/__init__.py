"""The exchange: the step, written once, and what travels.

  base.py      Communicator: prepare -> transfer -> commit -> finish
  rounds.py    transfer as rounds: a communicator yields what travels
               (Gather, Sum, ...), run() hands it to the transport
  endpoint.py  Exchange: one replica's Compressor with its state beside it
               (memory, step counters, warm-up, clipping, byte ledger)
  allgather.py, allreduce.py   the built-in communicators (what travels)

The registry of communicators (LGC's included) is deepreduce_tf.communicators.
"""
