"""One replica's end of the exchange: a stateless Compressor and, beside it,
what a step keeps between steps.

    exchange = deepreduce_tf.from_params({'compressor': 'topk', ...})
    payload, ctx = exchange.compress(grad, name="dense/kernel")
    grad_sum = exchange.decompress(payload, ctx)   # for each worker's payload

An Exchange holds, per key (a variable or a fused bucket): the residual
memory, the step counter that seeds randomk and QSGD (equal on every
worker), the warm-up's progress, and the byte ledger; plus the local
clipping and warm-up configuration and the communicator, chosen once. Each
part declares the state it keeps when it is built (state_declaration());
the variables are created on the first step. It is a tf.Module: a
checkpoint holding it saves that state (memory, steps, ledger, and the
communicator's own, communicator_state: PowerSGD's Q, LGC's autoencoder).

Every path of a step is the same three pieces: prepare() (clip, compensate
with memory, advance the counter, derive the seed), an encoding by the
Compressor or the communicator, and commit() (update the memory with
exactly what the receivers decode, record the bytes).
deepreduce_tf.exchange.base.Communicator.step runs them around the
transport; compress(), compress_bucket(), compress_batch() and
compress_slices() run the sender's half locally, for tests and for trying a
configuration.
"""
import collections
import math

import tensorflow as tf

from deepreduce_tf import accounting
from deepreduce_tf._checks import all_finite, guarded
from deepreduce_tf._variables import (StateVar, default_variable_factory,
                                      ensure_initialized, state_scope)
from deepreduce_tf.compressor import (WARMUP_CHOICES, BatchContext, BucketContext, Compressor,
                                      Context, _graph_safe)
from deepreduce_tf.memory import Memory, NoMemory

SCHEDULES = (None, "cosine")

Prepared = collections.namedtuple(
    "Prepared", ["key", "x", "rest", "fits", "step", "seed", "warmup", "deps", "nonfinite",
                 "rest_nonfinite"], defaults=(None, None))
Prepared.__doc__ = """One key's compensated input to an encoding.

key: the memory and ledger key; x: the memory-compensated flat gradient (a
bucket's sparse section; None when the bucket has none); rest: a bucket's
dense section (None for a tensor); fits: whether x fits the value codec
(None when not computed); step: the key's step number (None when the key
keeps no counter); seed: int64 scalar seed of this step; warmup: (in_warmup,
ratio) or None; deps: the state's initialization ops (TF1 graphs);
nonfinite: a bool scalar, True when x holds NaN or Inf (None with
nonfinite='raise', where such a step fails, or without x); rest_nonfinite:
the same of rest where the memory keeps state for it (DGC's velocity of the
small tensors), else None. The step's non-finite rules live in prepare()
and commit(), for every communicator."""

Outcome = collections.namedtuple("Outcome", ["sent", "keep", "ctx"])
Outcome.__doc__ = """What one key's encoding sent: sent, the memory.Sent of
what the receivers decode (None: nothing to remember); keep, a bool scalar
(True: leave the residual as it was, beyond the step's own rule that a
step holding NaN/Inf does; e.g. another worker's step did) or None; ctx,
the context recorded in the byte ledger (None: nothing)."""


def _any(*flags):
    """The logical or of the bool scalars given (None: absent); None if none is."""
    flags = [f for f in flags if f is not None]
    if not flags:
        return None
    out = flags[0]
    for f in flags[1:]:
        out = tf.logical_or(out, f)
    return out


class Exchange(tf.Module):
    """A Compressor with the state a step keeps beside it, for one replica.

    Args:
      compressor: a deepreduce_tf.compressor.Compressor (stateless).
      memory: a memory.Memory (default none).
      communicator: the communicator the exchange runs (deepreduce_tf.
        exchange; default all-gather), checked here against the compressor.
      ledger: an accounting.ByteLedger, None for no accounting (and no
        accounting variables), or by default a new one.
      variable_factory: callable(initial_value, name) -> tf.Variable used
        for every state variable (residuals, step counters, byte counters,
        codec state) unless the memory/ledger brought their own;
        tf.distribute integrations use it to create per-replica variables.
      warmup_steps: the first warmup_steps steps of every tensor/bucket
        are a warm-up (default 0: none), of kind `warmup`:
          'dense'        sent uncompressed (dense mode, residual empty);
          'exponential'  DGC's warm-up: top-k density falls exponentially
                         from 25 % at step 1 to compress_ratio at step
                         warmup_steps + 1 (ratio_t = 0.25 (r / 0.25)^((t-1)/W));
                         needs compressor 'topk'.
      clip_norm: local gradient clipping (DGC): each worker scales its
        gradients so that their global L2 norm (over the batch of
        compress_batch, over the tensor for compress) is at most clip_norm,
        before error feedback. None (default): no clipping.
      hierarchical: under MultiWorkerMirroredStrategy with several devices
        per worker, sum inside each worker first and compress only between
        workers (from_params' 'hierarchical' key; default True).
      schedule, schedule_steps: the learning-rate schedule applied by the
        exchange instead of the optimizer (None: none, the default;
        'cosine': step t's gradients, the small tensors' too, are scaled by
        (1 + cos(pi min(t - 1, T) / T)) / 2, T = schedule_steps, before
        error feedback). The residual then holds steps taken at the
        learning rate of the step that made them, not gradients that a
        later, smaller learning rate will scale (error feedback in update
        space; EF-SGD, Karimireddy et al. 2019). Run the optimizer at the
        schedule's peak learning rate, constant. Needs error feedback.
      params: the from_params dict it was built from (None otherwise).

    Raises:
      ValueError: an incompatible combination (the message says why).
    """

    def __init__(self, compressor, memory=None, communicator=None, ledger="default",
                 variable_factory=None, warmup_steps=0, warmup="dense", clip_norm=None,
                 name=None, hierarchical=True, params=None, schedule=None, schedule_steps=None):
        super().__init__(name=name)
        if not isinstance(compressor, Compressor):
            raise TypeError(f"compressor must be a deepreduce_tf.compressor.Compressor, got "
                            f"{compressor!r}")
        self.compressor = compressor
        # Tracked as attributes (as before): a stateful codec's variables are
        # saved under index_codec / value_codec.
        self.sparsifier = compressor.sparsifier
        self.index_codec = compressor.index_codec
        self.value_codec = compressor.value_codec
        self.variable_factory = variable_factory or default_variable_factory
        self.memory = memory if memory is not None else NoMemory()
        if not isinstance(self.memory, Memory):
            raise TypeError(f"memory must be a deepreduce_tf.memory.Memory, got {memory!r}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an integer >= 0, got {warmup_steps!r}")
        if warmup not in WARMUP_CHOICES:
            raise ValueError(f"warmup must be one of {', '.join(WARMUP_CHOICES)}, got {warmup!r}")
        if warmup_steps and self.sparsifier.dense:
            raise ValueError("warmup_steps needs a sparsifier (compressor 'none' sends every "
                             "position already)")
        if warmup_steps and warmup == "exponential" and not hasattr(self.sparsifier,
                                                                    "select_ratio_values"):
            raise ValueError(f"warmup='exponential' shrinks top-k's ratio; compressor "
                             f"{self.sparsifier.name!r} has none (use warmup='dense')")
        self.warmup_steps = warmup_steps
        self.warmup = warmup
        if clip_norm is not None:
            try:
                clip_norm = float(clip_norm)
            except (TypeError, ValueError):
                clip_norm = -1.0
            if not clip_norm > 0 or clip_norm == float("inf"):
                raise ValueError(f"clip_norm must be a finite number > 0 or None, got "
                                 f"{clip_norm!r}")
        self.clip_norm = clip_norm
        if schedule in ("none", "constant"):
            schedule = None
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of none, {', '.join(SCHEDULES[1:])}, got "
                             f"{schedule!r}")
        if schedule is not None:
            if (isinstance(schedule_steps, bool) or not isinstance(schedule_steps, int)
                    or schedule_steps < 1):
                raise ValueError(f"schedule={schedule!r} needs schedule_steps, the number of "
                                 f"steps it spans (an integer >= 1), got {schedule_steps!r}")
            if isinstance(self.memory, NoMemory):
                raise ValueError(f"schedule={schedule!r} moves the learning-rate schedule into "
                                 "error feedback, and this configuration has none (memory "
                                 "'none'): keep the schedule in the optimizer, or use memory "
                                 "'residual' or 'dgc'")
        elif schedule_steps is not None:
            raise ValueError(f"schedule_steps={schedule_steps!r} without a schedule: add "
                             "schedule='cosine' or drop schedule_steps")
        self.schedule = schedule
        self.schedule_steps = schedule_steps
        if communicator is None:
            raise TypeError("Exchange needs its communicator (deepreduce_tf.communicators); "
                            "deepreduce_tf.from_params chooses it from the parameters")
        self.communicator = communicator
        self.communicator.check(self)
        self.hierarchical = bool(hierarchical)
        self.params = dict(params) if params is not None else None
        if variable_factory is not None:
            self.memory.use_factory(variable_factory)
        for codec in compressor.codecs:
            codec.build(self.variable_factory)
        self.ledger = (accounting.ByteLedger(variable_factory=self.variable_factory)
                       if ledger == "default" else ledger)
        self.steps = {}
        self.communicator_state = communicator.make_state(self)

    def reconfigure(self, communicator=None, accounting=True):
        """Before its first step: runs `communicator` instead of its own
        (checked against this exchange; None keeps it) and, with
        accounting=False, keeps no byte ledger. deepreduce_tf.distribute
        uses it to give every replica's exchange the one communicator it
        chose."""
        if communicator is not None and communicator is not self.communicator:
            if self.steps or (self.communicator_state is not None
                              and self.communicator_state.variables):
                raise RuntimeError("Exchange.reconfigure: this exchange has run steps; its "
                                   "communicator can only change before the first")
            communicator.check(self)
            self.communicator = communicator
            self.communicator_state = communicator.make_state(self)
        if not accounting:
            self.ledger = None  # its counters are created lazily: none exist yet

    # ------------------------------------------------------ the compressor's
    min_size = property(lambda self: self.compressor.min_size)
    nonfinite = property(lambda self: self.compressor.nonfinite)
    seed = property(lambda self: self.compressor.seed)
    bucket_cap_mb = property(lambda self: self.compressor.bucket_cap_mb)
    config_id = property(lambda self: self.compressor.config_id)

    def plan(self, keys, tensors):
        """The fusion plan of a batch (cached per keys, shapes and dtypes)."""
        return self.compressor.plan(keys, tensors)

    def identity(self, key, shape):
        return self.compressor.identity(key, shape)

    def value_limit(self, dtype):
        return self.compressor.value_limit(dtype)

    # Decoding needs the configuration only: the compressor's.
    def decompress(self, payload, ctx):
        return self.compressor.decompress(payload, ctx)

    def decompress_bucket(self, payload, ctx):
        return self.compressor.decompress_bucket(payload, ctx)

    def decompress_buckets_sum(self, payloads, ctx):
        return self.compressor.decompress_buckets_sum(payloads, ctx)

    def decompress_batch(self, payload, ctx):
        return self.compressor.decompress_batch(payload, ctx)

    def decompress_batch_flat(self, payload, ctx):
        return self.compressor.decompress_batch_flat(payload, ctx)

    def decompress_batch_sum(self, payloads, ctx):
        return self.compressor.decompress_batch_sum(payloads, ctx)

    def decompress_slices(self, payload, ctx):
        return self.compressor.decompress_slices(payload, ctx)

    # ----------------------------------------------------------- helpers
    @property
    def additive(self):
        """True if the communicator sums payloads element-wise."""
        return self.communicator.additive

    def __repr__(self):
        extra = "".join(f", {k}={v!r}" for k, v in (("warmup_steps", self.warmup_steps),
                                                     ("clip_norm", self.clip_norm),
                                                     ("schedule", self.schedule),
                                                     ("schedule_steps", self.schedule_steps))
                        if v)
        return (f"Exchange({self.compressor!r}, memory={type(self.memory).__name__}, "
                f"communicator={self.communicator!r}{extra})")

    def state_declaration(self):
        """What a step keeps between steps, declared by each part when it was
        built: a tuple of (owner, _variables.StateVar), owner one of
        'memory', 'exchange' (step counters), 'communicator', 'codec:<name>',
        'ledger' (byte counters)."""
        out = [("memory", v) for v in self.memory.STATE]
        counted, _ = self.communicator.counts(self)
        if counted or self.schedule is not None:
            out.append(("exchange", StateVar("step", "int64", "[]", "bucket")))
        out += [("communicator", v) for v in self.communicator.state_vars()]
        for codec in self.compressor.codecs:
            out += [(f"codec:{codec.name}", StateVar(getattr(v, "name", "variable"),
                                                     v.dtype.name, str(v.shape), "codec"))
                    for v in codec.variables or ()]
        if self.ledger is not None:
            out.append(("ledger", StateVar("bytes", "int64", "[]", "bucket")))
        return tuple(out)

    @property
    def keeps_state(self):
        """True if training resumed without this exchange's state would
        differ (byte counters aside): something but the ledger is declared."""
        return any(owner != "ledger" for owner, _ in self.state_declaration())

    @property
    def stateless(self):
        """True if a step creates no variables (ledger aside)."""
        return not self.keeps_state

    def _check_tensor(self, tensor, name):
        return self.compressor.check_tensor(tensor, name)

    def _needs_seed(self, dense):
        return self.compressor.needs_seed(dense)

    def _key(self, name):
        if name is None and not isinstance(self.memory, NoMemory):
            raise ValueError("residual memory keeps one residual per variable: pass "
                             "compress(tensor, name=...) with the variable's name")
        return self.compressor._key(name)  # pylint: disable=protected-access

    def _batch_keys(self, tensors, names):
        if names is None and not isinstance(self.memory, NoMemory):
            raise ValueError("residual memory keeps residuals per variable: pass "
                             "compress_batch(tensors, names=[...]) with one name per tensor")
        return self.compressor._batch_keys(tensors, names)  # pylint: disable=protected-access

    def receiver_context(self, name, shape, dtype):
        """The Context with which a worker that did not compress the tensor
        `name` of this shape and dtype decodes another worker's payload of it
        (what compress() would have returned there, less the payload size)."""
        self._key(name)
        return self.compressor.receiver_context(name, shape, dtype)

    def receiver_batch_context(self, specs, names=None):
        """The BatchContext with which a worker that did not compress a batch
        of tensors (tf.TensorSpec-like: .shape, .dtype) decodes another
        worker's compress_batch() payload of them."""
        return self.compressor.receiver_batch_context(specs, self._batch_keys(specs, names))

    # ------------------------------------------------------------- state
    def step_counter(self, key):
        """The per-key step counter variable (created on first use)."""
        counter = self.steps.get(key)
        if counter is None:
            with state_scope():
                counter = self.variable_factory(tf.constant(0, tf.int64), "step")
                self.steps[key] = counter
        return counter

    def advance(self, key):
        """Advances the key's step counter; returns the step number (1 on the
        first step)."""
        return self.step_counter(key).assign_add(1)

    def step_seed(self, key, step=None):
        """A per-key, per-step seed, equal on every worker (advances the
        key's step counter unless `step`, from advance(), is given)."""
        step = self.advance(key) if step is None else step
        return step + tf.constant(self.compressor.key_seed(key) << 20, tf.int64)

    _step_seed = step_seed

    def counts(self, dense=False):
        """(counted, seeded) of a tensor/bucket: whether its compress
        advances a step counter, and whether its encoding needs the seed."""
        seeded = self.compressor.needs_seed(dense)
        return seeded or (not dense and self.warmup_steps > 0), seeded

    def warmup_plan(self, step):
        """(in_warmup, ratio) for this step: a bool scalar (None without
        warm-up) and, for the exponential warm-up, the step's top-k ratio."""
        if not self.warmup_steps or step is None:
            return None
        steps = tf.constant(self.warmup_steps, tf.int64)
        in_warmup = step <= steps
        if self.warmup == "dense":
            return in_warmup, None
        start, target = 0.25, self.sparsifier.compress_ratio
        if target >= start:
            return None
        frac = tf.cast(tf.minimum(step - 1, steps), tf.float64) / float(self.warmup_steps)
        ratio = start * tf.exp(frac * math.log(target / start))
        return in_warmup, ratio

    def schedule_scale(self, step, dtype):
        """The schedule's factor of step `step` (1 on the first), in dtype."""
        steps = tf.constant(self.schedule_steps, tf.int64)
        frac = tf.cast(tf.minimum(step - 1, steps), tf.float64) / float(self.schedule_steps)
        return tf.cast(0.5 * (1.0 + tf.cos(math.pi * frac)), dtype)

    def scheduled(self, key, x):
        """(x, step, deps): with a schedule, advances the key's step counter
        and scales x by the step's factor (else x, None, [])."""
        if self.schedule is None:
            return x, None, []
        deps = self.state_dependencies(key, seeded=True)
        with tf.control_dependencies(deps):
            step = self.advance(key)
            return x * self.schedule_scale(step, x.dtype), step, deps

    def clip(self, tensors):
        """Local clipping: tensors scaled so that their global L2 norm is at
        most clip_norm (unchanged when it is already)."""
        if self.clip_norm is None:
            return tensors
        clipped, _ = tf.clip_by_global_norm(tensors, self.clip_norm)
        return [tf.convert_to_tensor(t) for t in clipped]

    def state_dependencies(self, key, like=None, seeded=False, dense_like=None):
        """Creates the state `key` needs (residual shaped like `like`, step
        counter if seeded, the memory's state of a dense section shaped like
        `dense_like`) and returns the ops that initialize it in a TF1 graph
        (see _variables.ensure_initialized); [] under eager execution."""
        variables = []
        if like is not None:
            variables.extend(self.memory.state_variables(key, like))
        if dense_like is not None:
            variables.extend(self.memory.dense_variables(key, dense_like))
        if seeded:
            variables.append(self.step_counter(key))
        if self.ledger is not None:
            variables.extend(self.ledger.variables_for(key))
        for codec in self.compressor.codecs:
            variables.extend(getattr(codec, "variables", ()) or ())
        return ensure_initialized(variables)

    def record(self, ctx):
        """Records ctx in the ledger; returns the update ops ([] without a
        ledger or under eager execution), which the caller's output must
        depend on (see _checks.guarded)."""
        if self.ledger is None or ctx is None:
            return []
        return [op for op in self.ledger.record(ctx) or () if op is not None]

    def record_bytes(self, key, sent):
        """Records bytes sent that are not one key's (a batch container)."""
        if self.ledger is None:
            return []
        return [op for op in self.ledger.record_bytes(key, sent) or () if op is not None]

    def record_received(self, key, nbytes):
        """Records the bytes this replica received from the others in
        exchange `key`."""
        if self.ledger is None:
            return []
        return [op for op in self.ledger.record_received(key, nbytes) or () if op is not None]

    def record_support(self, union, picks):
        """Records a sparse all-reduce step's support |U| and k."""
        if self.ledger is None:
            return []
        return [op for op in self.ledger.record_support(union, picks) or () if op is not None]

    # ----------------------------------------------------- the step's ends
    def prepare_dense(self, key, rest):
        """(rest, nonfinite, deps): a dense section (tensors below min_size)
        as it travels. Where the memory keeps state for it (DGC: the small
        tensors' velocity) it is compensated, under the step's non-finite
        rule; else it travels as it is (nonfinite None, no deps)."""
        if not self.memory.dense_variables(key, rest):
            return rest, None, []
        deps = self.state_dependencies(key, dense_like=rest)
        with tf.control_dependencies(deps):
            rest, nonfinite = self.nonfinite_rule(self.memory.compensate_dense(rest, key), key)
        return rest, nonfinite, deps

    def prepare(self, key, x, counted, seeded, within=True, rest=None, rest_nonfinite=None,
                rest_deps=(), step=None):
        """Advances the key's step counter (counted, or a schedule), scales
        the flat gradient x by the schedule, compensates it with the key's
        memory and derives the step's seed (seeded). within: also compute
        whether the result fits the value codec (in the compensation's
        pass). rest, rest_nonfinite, rest_deps: the bucket's dense section
        from prepare_dense(); step: the step prepare_bucket advanced (x then
        scaled already). Returns a Prepared."""
        counted = counted or self.schedule is not None
        deps = self.state_dependencies(key, x, counted) + list(rest_deps)
        with tf.control_dependencies(deps):
            # Counters first: a step that fails under nonfinite='raise' has
            # advanced every replica's alike. A step given (prepare_bucket's,
            # with a schedule) has advanced and scaled x already.
            if step is None and self.schedule is not None:
                x, step, _ = self.scheduled(key, x)
            elif step is None and counted:
                step = self.advance(key)
            if within:
                x, fits = self.memory.compensate_within(x, key, self.value_limit(x.dtype))
            else:
                x, fits = self.memory.compensate(x, key), None
            seed = self.step_seed(key, step) if seeded else tf.constant(0, tf.int64)
            warmup = self.warmup_plan(step)
            x, nonfinite = self.nonfinite_rule(x, key, fits)
        return Prepared(key, x, rest, fits, step, seed, warmup, deps, nonfinite, rest_nonfinite)

    def nonfinite_rule(self, x, key, fits=None):
        """The step's non-finite policy, for every communicator: with
        nonfinite='raise' a compensated gradient holding NaN or Inf fails the
        step (x comes back guarded by the check, and None); with 'dense' it
        travels (the sum shows the overflow to loss scaling) and the bool
        scalar returned tells commit() to leave the residual as it was: one
        bad step must not poison every later one. fits (all values within
        the codec's range, when known) spares the finiteness pass."""
        if self.nonfinite == "raise":
            return all_finite(x, message=f"gradient {key!r} holds NaN or Inf "
                                         "(nonfinite='raise')"), None
        if fits is None:
            return x, tf.logical_not(tf.reduce_all(tf.math.is_finite(x)))
        return x, tf.cond(fits, lambda: tf.constant(False),
                          lambda: tf.logical_not(tf.reduce_all(tf.math.is_finite(x))))

    def prepare_bucket(self, bucket, flat, counts=None, within=True):
        """prepare() of a fused bucket's sparse section (its dense section
        travels as it is). counts: (counted, seeded), default counts()."""
        key, sparse_n, dense_n = bucket.key, bucket.sparse_n, bucket.dense_n
        step, step_deps = None, []
        if dense_n:  # one step scales both sections
            flat, step, step_deps = self.scheduled(key, flat)
        rest = flat[sparse_n:] if sparse_n else flat
        rest_nonfinite, rest_deps = None, []
        if dense_n:
            rest, rest_nonfinite, rest_deps = self.prepare_dense(key, rest)
        rest_deps = step_deps + rest_deps
        if not sparse_n:
            return Prepared(key, None, rest, None, step, tf.constant(0, tf.int64), None,
                            self.state_dependencies(key) + rest_deps, None, rest_nonfinite)
        x = flat[:sparse_n] if dense_n else flat
        counted, seeded = self.counts() if counts is None else counts
        return self.prepare(key, x, counted, seeded, within, rest, rest_nonfinite, rest_deps,
                            step)

    def prepare_batch(self, plan, tensors, counts=None, within=True):
        """Clips a batch, packs it into the plan's buckets and prepares each."""
        flats = plan.pack(self.clip(tensors))
        return [self.prepare_bucket(b, f, counts, within) for b, f in zip(plan.buckets, flats)]

    def commit(self, prepared, outcome):
        """Updates the key's memory with what the receivers decode and
        records the bytes. Returns the ops the step's output must depend on."""
        with tf.control_dependencies(prepared.deps):
            # The counter's advance runs with the step even where nothing
            # reads it (a TF1 graph runs only what the output depends on).
            effects = [prepared.step] if prepared.step is not None else []
            if outcome.sent is not None:
                effects.append(self.memory.update_sent(
                    prepared.key, prepared.x, outcome.sent,
                    keep=_any(prepared.nonfinite, outcome.keep)))
            if prepared.rest is not None:
                # Either section's NaN/Inf keeps both: the step is one step.
                effects.append(self.memory.update_dense(
                    prepared.key, keep=_any(prepared.nonfinite, prepared.rest_nonfinite,
                                            outcome.keep)))
            effects += self.record(outcome.ctx)
        return [e for e in effects if e is not None]

    # --------------------------------------------- the all-gather encoding
    def encode_bucket(self, bucket, prepared):
        """A prepared bucket -> (payload, Outcome): the all-gather wire
        format (compressor.bucket_payload)."""
        comp = self.compressor
        if bucket.sparse_n:
            with tf.control_dependencies(prepared.deps):
                enc = comp.encode(prepared.x, bucket.key, prepared.seed, bucket.lengths,
                                  prepared.warmup, prepared.fits)
            sent = comp.sent(enc)
        else:
            enc, sent = comp.encode_empty(bucket.dtype), None
        payload, ctx = comp.bucket_payload(bucket, enc, prepared.rest)
        return payload, Outcome(sent, None, ctx)

    def encode_batch(self, plan, prepared):
        """Prepared buckets -> (payload, BatchContext, outcomes, container):
        one payload for the batch; container is the (key, bytes) of the
        batch container that wraps several buckets (None for one)."""
        parts, outcomes = [], []
        for bucket, prep in zip(plan.buckets, prepared):
            p, out = self.encode_bucket(bucket, prep)
            parts.append(p)
            outcomes.append(out)
        payload = self.compressor.batch_payload(plan, parts)
        ctx = BatchContext(plan, tuple(o.ctx for o in outcomes))
        container = None
        if len(parts) > 1:
            container = (f"(batch container)/{len(parts)}",
                         tf.size(payload, out_type=tf.int64)
                         - tf.add_n([o.ctx.payload_bytes for o in outcomes]))
        return payload, ctx, outcomes, container

    # ------------------------------------------- the sender's half, locally
    @_graph_safe
    def compress(self, tensor, name=None):
        """Compresses one gradient (memory compensation and update included).

        Args:
          tensor: float16/bfloat16/float32/float64 tensor of static shape.
          name: the variable's name (the memory key); required with residual
            memory. The payload's config field fingerprints it with the
            shape and the configuration, so that decompress() refuses the
            payload of another variable; with name=None that identity is
            the shape (and configuration) only.

        Returns:
          (payload, ctx): payload is a uint8 vector; ctx a Context, kept
          locally.

        Raises:
          TypeError / ValueError: unsupported dtype, dynamic shape, missing
            name.
          InvalidArgumentError: (run time) NaN/Inf with nonfinite='raise'.
        """
        comp = self.compressor
        key = self._key(name)
        tensor = comp.check_tensor(tensor, key)
        n = tensor.shape.num_elements()
        identity = comp.identity(key, tensor.shape)
        x = tf.reshape(tensor, [-1])
        if n < comp.min_size:
            x, step, _ = self.scheduled(key, x)
            x, nonfinite, dense_deps = self.prepare_dense(key, x)
            deps = self.state_dependencies(key, seeded=step is not None) + dense_deps
            with tf.control_dependencies(deps):
                payload = comp.dense_payload(x, identity)
                ctx = comp.context(key, tensor, True, payload)
                effects = (self.record(ctx) + [self.memory.update_dense(key, keep=nonfinite)]
                           + ([] if step is None else [step]))
                return guarded(payload, *[e for e in effects if e is not None]), ctx
        (x,) = self.clip([x])
        prep = self.prepare(key, x, *self.counts())
        with tf.control_dependencies(prep.deps):
            enc = comp.encode(prep.x, key, prep.seed, warmup=prep.warmup, fits=prep.fits)
            payload = comp.tensor_payload(enc, x.dtype, n, identity)
            ctx = comp.context(key, tensor, False, payload)
        return guarded(payload, *self.commit(prep, Outcome(comp.sent(enc), None, ctx))), ctx

    @_graph_safe
    def compress_bucket(self, bucket, flat):
        """Compresses one fused bucket (fusion.Bucket) given as its flat
        vector: ONE sparsification (per variable, with a segmented kernel, or
        over the bucket with topk_scope='bucket'), one index and one value
        coding of the sparse section, the dense section as raw bytes.

        Returns (payload, BucketContext)."""
        flat = self.compressor.check_bucket(bucket, flat)
        prep = self.prepare_bucket(bucket, flat)
        payload, outcome = self.encode_bucket(bucket, prep)
        return guarded(payload, *self.commit(prep, outcome)), outcome.ctx

    @_graph_safe
    def compress_batch(self, tensors, names=None):
        """Compresses several gradients into ONE payload: the tensors are fused
        into buckets (deepreduce_tf.fusion: per dtype, at most bucket_cap_mb
        each, small tensors in a dense section) and each bucket is compressed
        once (compress_bucket). The graph this builds does not grow with the
        number of tensors, apart from the reshapes that pack and unpack them.

        Args:
          tensors: float tensors of static shapes.
          names: one unique name per tensor (their memory keys); required
            with residual memory.

        Returns:
          (payload, ctx): the batch payload (the bucket's payload when the
          batch fits one bucket, else a container of kind KIND_BATCH whose
          sections are the bucket payloads) and a BatchContext.
        """
        tensors = [tf.convert_to_tensor(t) for t in tensors]
        keys = self._batch_keys(tensors, names)
        for t, k in zip(tensors, keys):
            self.compressor.check_tensor(t, k)
        plan = self.plan(keys, tensors)
        prepared = self.prepare_batch(plan, tensors)
        payload, ctx, outcomes, container = self.encode_batch(plan, prepared)
        effects = []
        for prep, outcome in zip(prepared, outcomes):
            effects += self.commit(prep, outcome)
        if container is not None:
            effects += self.record_bytes(*container)
        return guarded(payload, *effects), ctx

    @_graph_safe
    def compress_slices(self, slices, name=None, dense_shape=None):
        """Compresses a tf.IndexedSlices gradient without densifying it
        (Compressor.encode_slices: rows sorted and coded losslessly, values by
        the value codec; no sparsifier and no memory apply).

        Returns (payload, SlicesContext)."""
        deps = self.state_dependencies(name or "slices")
        with tf.control_dependencies(deps):
            payload, ctx = self.compressor.encode_slices(slices, name, dense_shape)
            return guarded(payload, *self.record(ctx)), ctx


__all__ = ["BatchContext", "BucketContext", "Context", "Exchange", "Outcome", "Prepared"]
