"""Byte accounting: what each compress sent, against what it replaced.

Every Compressor records each compress() in its ByteLedger (compressor.ledger):
per variable, the payload bytes and the dense bytes of the LAST step, and
running totals. The numbers live in int64 tf.Variables, so they are updated
inside tf.function too; read them eagerly (step_totals(), per_variable()) or
log them (summary()).
"""
import tensorflow as tf

from deepreduce_tf._variables import default_variable_factory, ensure_initialized, state_scope


def ring_received(nbytes, replicas):
    """Bytes a ring all-reduce of an nbytes vector delivers to each of
    `replicas` replicas: 2 (R - 1) / R of it (reduce-scatter, then
    all-gather). An int or an int64 tensor, as nbytes."""
    return 2 * (replicas - 1) * nbytes // replicas


class ByteLedger(tf.Module):
    """Per-variable byte counters, created lazily."""

    def __init__(self, variable_factory=None, name=None):
        super().__init__(name=name)
        self._factory = variable_factory or default_variable_factory
        self.sent = {}
        self.dense = {}
        self.total_sent = None
        self.total_dense = None
        # Bytes this replica received from the others, per exchange key (the
        # last exchange) and in total; created by the first record_received.
        self.received = {}
        self.total_received = None
        # A sparse all-reduce's support: |U| and the positions the workers
        # picked (k, summed over the buckets) of the last sparse step and
        # since creation, and the smallest |U| / k of a step
        # (record_support; created by its first call).
        self.support = None

    def _var(self, table, key):
        var = table.get(key)
        if var is None:
            with state_scope():
                var = self._factory(tf.constant(0, tf.int64), "bytes")
                table[key] = var
        return var

    def _totals(self):
        if self.total_sent is None:
            with state_scope():
                self.total_sent = self._factory(tf.constant(0, tf.int64), "total_sent")
                self.total_dense = self._factory(tf.constant(0, tf.int64), "total_dense")

    def variables_for(self, key):
        """Creates (if needed) and returns the variables record(key) uses."""
        self._totals()
        return [self._var(self.sent, key), self._var(self.dense, key), self.total_sent,
                self.total_dense]

    def record(self, ctx):
        """Records one compress (a compressors.Context). Returns the update
        ops (None under eager execution)."""
        return self.record_bytes(ctx.name, ctx.payload_bytes, ctx.dense_bytes)

    def record_bytes(self, key, sent, dense=0):
        """Records bytes that are not one compress: e.g. the container of a
        batch payload (sent, no dense counterpart)."""
        self._totals()
        sent = tf.cast(sent, tf.int64)
        dense = tf.cast(dense, tf.int64)
        # The update ops are returned: in a TF1 graph nothing runs them
        # unless the caller makes its output depend on them.
        return [self._var(self.sent, key).assign(sent, read_value=False),
                self._var(self.dense, key).assign(dense, read_value=False),
                self.total_sent.assign_add(sent, read_value=False),
                self.total_dense.assign_add(dense, read_value=False)]

    def record_received(self, key, nbytes):
        """Records the bytes this replica received from the others in one
        exchange `key`. Returns the update ops (None under eager execution)."""
        if self.total_received is None:
            with state_scope():
                self.total_received = self._factory(tf.constant(0, tf.int64), "total_received")
        nbytes = tf.cast(nbytes, tf.int64)
        var = self._var(self.received, key)
        # TF1 graphs run without an initializer: the counters initialize themselves
        with tf.control_dependencies(ensure_initialized([var, self.total_received])):
            return [var.assign(nbytes, read_value=False),
                    self.total_received.assign_add(nbytes, read_value=False)]

    def record_support(self, union, picks):
        """Records the support of one sparse all-reduce step: `union` = |U|,
        `picks` = k (what the workers picked; a dense step records 0 and
        changes nothing). Returns the update ops."""
        if self.support is None:
            with state_scope():
                self.support = {name: self._factory(tf.constant(0, tf.int64), name) for name in
                                ("last_union", "last_picks", "total_union", "total_picks")}
                self.support["min_ratio"] = self._factory(
                    tf.constant(float("inf"), tf.float64), "min_ratio")
        v = self.support
        union, picks = tf.cast(union, tf.int64), tf.cast(picks, tf.int64)
        sparse = picks > 0
        ratio = tf.cast(union, tf.float64) / tf.cast(tf.maximum(picks, 1), tf.float64)
        with tf.control_dependencies(ensure_initialized(list(v.values()))):
            return [v["last_union"].assign(tf.where(sparse, union, v["last_union"]),
                                           read_value=False),
                    v["last_picks"].assign(tf.where(sparse, picks, v["last_picks"]),
                                           read_value=False),
                    v["total_union"].assign_add(union, read_value=False),
                    v["total_picks"].assign_add(picks, read_value=False),
                    v["min_ratio"].assign(tf.where(sparse, tf.minimum(v["min_ratio"], ratio),
                                                   v["min_ratio"]), read_value=False)]

    def support_totals(self):
        """{"union", "picks" (since creation), "last" (|U| / k of the last sparse
        step), "min" (the smallest)}, or None before any sparse all-reduce step."""
        if self.support is None or int(self.support["total_picks"].numpy()) == 0:
            return None
        v = {k: var.numpy() for k, var in self.support.items()}
        return {"union": int(v["total_union"]), "picks": int(v["total_picks"]),
                "last": int(v["last_union"]) / max(int(v["last_picks"]), 1),
                "min": float(v["min_ratio"])}

    def received_totals(self):
        """(bytes received in the last exchange of every key, summed; bytes
        received since creation)."""
        last = sum(int(v.numpy()) for v in self.received.values())
        total = 0 if self.total_received is None else int(self.total_received.numpy())
        return last, total

    def per_variable(self):
        """{name: (payload_bytes, dense_bytes)} of each variable's last compress."""
        return {k: (int(self.sent[k].numpy()), int(self.dense[k].numpy()))
                for k in sorted(self.sent)}

    def step_totals(self):
        """(payload_bytes, dense_bytes) summed over variables, last step of each."""
        per = self.per_variable()
        return sum(s for s, _ in per.values()), sum(d for _, d in per.values())

    def running_totals(self):
        """(payload_bytes, dense_bytes) over every compress since creation."""
        if self.total_sent is None:
            return 0, 0
        return int(self.total_sent.numpy()), int(self.total_dense.numpy())

    def summary(self):
        """A printable table of the last step, per variable and in total."""
        rows = [f"{'variable':<40} {'sent B':>12} {'dense B':>12} {'ratio':>8}"]
        for k, (s, d) in self.per_variable().items():
            rows.append(f"{k[:40]:<40} {s:>12,} {d:>12,} {d / max(s, 1):>8.1f}")
        s, d = self.step_totals()
        rows.append(f"{'TOTAL':<40} {s:>12,} {d:>12,} {d / max(s, 1):>8.1f}")
        return "\n".join(rows)
