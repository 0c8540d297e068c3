"""All-gather: every replica sends ONE payload of its whole batch.

Every replica encodes its prepared buckets into one batch payload
(Exchange.encode_batch: the compressor's sparsifier and codecs, fused
buckets), the payloads are all-gathered, and each process decodes every
payload ONCE and sums them in replica order. Works with every compressor.
A batch's dense tensors and its tf.IndexedSlices travel in ONE collective
(Transport.all_gather_parts).
"""
import tensorflow as tf

from deepreduce_tf.exchange.base import Communicator, Transfer
from deepreduce_tf.exchange.rounds import Gather, Group


class Allgather(Communicator):
    name = "allgather"
    travels = "gathered bytes: one batch payload per replica (sparsifier + index and value codecs)"
    checks_range = True
    collectives = ("gather",)

    @staticmethod
    def encode(group, exchanges, plan, prepared):
        """Per replica: (payload, ctx, outcomes, sent records)."""
        out = []
        for ex, device, preps in zip(exchanges, group.devices, prepared):
            with tf.device(device):
                payload, ctx, outcomes, container = ex.encode_batch(plan, preps)
            out.append((payload, ctx, outcomes, [container] if container else []))
        return out

    def decode(self, group, exchanges, encoded, received, key):
        """The gathered batch payloads -> a Transfer (the sum, decoded once
        per payload with one scatter per bucket)."""
        payloads = [e[0] for e in encoded]
        ctx = encoded[0][1]
        with tf.device(group.reduce_device):
            # Decoding needs the configuration only, no state.
            sums = exchanges[0].decompress_batch_sum(received, ctx)
            got = self.gathered(received, payloads)
        return Transfer(sums, [e[2] for e in encoded], [e[3] for e in encoded],
                        [[(key, g)] for g in got])

    def rounds(self, group, exchanges, plan, prepared, keys):
        encoded = self.encode(group, exchanges, plan, prepared)
        key = "batch/" + "|".join(keys)
        received = yield Gather([e[0] for e in encoded], key)
        return self.decode(group, exchanges, encoded, received, key)

    def step_all(self, transport, exchanges, tensors_by_replica, keys, slices_by_replica,
                 slice_keys, average=False, effects=()):
        """The batch payload and every slices payload of each replica travel
        in ONE all-gather (Transport.all_gather_parts), then decode as in
        step() and step_slices()."""
        if not slice_keys or (not keys and len(slice_keys) == 1):
            return super().step_all(transport, exchanges, tensors_by_replica, keys,
                                    slices_by_replica, slice_keys, average, effects)
        group = Group.of(transport)
        parts = [[] for _ in group.devices]
        if keys:
            plan, prepared = self.prepare(transport, exchanges, tensors_by_replica, keys)
            encoded = self.encode(group, exchanges, plan, prepared)
            for d, e in enumerate(encoded):
                parts[d].append(e[0])
        sliced = []
        for j, key in enumerate(slice_keys):
            payloads, ctx = self._compress_slices(
                transport, exchanges, [s[j] for s in slices_by_replica], key)
            sliced.append((payloads, ctx))
            for d, p in enumerate(payloads):
                parts[d].append(p)
        received = transport.all_gather_parts(
            parts, key="step/" + "|".join(list(keys) + [f"slices/{k}" for k in slice_keys]))
        dense = None
        if keys:
            result = self.decode(group, exchanges, encoded, received[0],
                                 "batch/" + "|".join(keys))
            sums = self.commit(transport, exchanges, prepared, result)
            dense = self._finish(transport, plan, sums, average, effects)
            received = received[1:]
        slices = [self._finish_slices(transport, exchanges, key, got, payloads, ctx, average,
                                      effects)
                  for key, got, (payloads, ctx) in zip(slice_keys, received, sliced)]
        return dense, slices
