"""The autoencoder of Learned Gradient Compression, in plain TensorFlow.

Fully convolutional over a 1-D signal (a bucket's values at the leader's
top-k positions, normalised by the leader's RMS), so one set of weights
serves every length:

  encoder  Conv1D 1 -> c0 -> c1 -> c2 -> c3 (kernel 3, stride 2), then a
           1x1 Conv1D c3 -> latent channels: length L -> L/16 x latent
           (L/4 floats with the default 4 channels)
  decoder  1x1 Conv1D latent -> c3, then transposed Conv1D (kernel 3,
           stride 2) c3 -> c2 -> c1 -> c0 -> 1: back to length L

'nonlinear' (the PS variant): biases and LeakyReLU(0.2) between layers,
one decoder per node. 'linear' (the RAR variant): no bias, no activation,
one decoder; then E(a + b) = E(a) + E(b) and D(za + zb) = D(za) + D(zb),
so latents summed by an all-reduce decode to the sum of the nodes' values.

Every variable (weights, Adam's moments, its step) comes from the
`variable_factory` the exchange uses for residuals, so that the autoencoder
lives where the exchange state lives and is saved with it. Training is one
Adam step (written out: the optimizer's state must be made by that same
factory) on the loss the communicator gives.
"""
import numpy as np
import tensorflow as tf

STRIDE_LAYERS = 4
MULTIPLE = 2 ** STRIDE_LAYERS  # input lengths are padded to a multiple of this
ADAM = (0.9, 0.999, 1e-8)


def parse_channels(text):
    """'64,128,256,64' -> (64, 128, 256, 64); ValueError if it is not four
    positive ints."""
    try:
        out = tuple(int(c) for c in str(text).split(","))
    except ValueError:
        out = ()
    if len(out) != STRIDE_LAYERS or any(c < 1 or c > 4096 for c in out):
        raise ValueError(f"lgc_channels must be {STRIDE_LAYERS} comma-separated channel counts "
                         f"in [1, 4096] (e.g. '64,128,256,64'), got {text!r}")
    return out


def latent_length(n, latent_channels):
    """Floats in the latent of an n-long signal."""
    return -(-n // MULTIPLE) * latent_channels


class Autoencoder(tf.Module):
    """encode(v [B, L]) -> z [B, latent_length(L)]; decode(z, node) -> [B, L].

    Args:
      kind: 'nonlinear' or 'linear' (see the module docstring).
      decoders: number of decoders (nodes for PS, 1 for RAR).
      channels: the four channel counts of the strided layers.
      latent_channels: channels of the latent.
      lr: Adam's learning rate.
      seed: initial weights (Glorot-uniform from numpy: the same on every worker).
      variable_factory: callable(initial_value, name) -> tf.Variable.
    """

    def __init__(self, kind, decoders, channels, latent_channels, lr, seed, variable_factory,
                 name="lgc_autoencoder"):
        super().__init__(name=name)
        if kind not in ("nonlinear", "linear"):
            raise ValueError(f"kind must be 'nonlinear' or 'linear', got {kind!r}")
        self.kind = kind
        self.channels = tuple(channels)
        self.latent_channels = int(latent_channels)
        self.num_decoders = int(decoders)
        self.lr = float(lr)
        rng = np.random.default_rng(seed)
        bias = kind == "nonlinear"
        make = variable_factory

        def weight(shape, fan_in, fan_out, name):
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            return make(tf.constant(rng.uniform(-limit, limit, shape).astype(np.float32)), name)

        def zeros(n, name):
            return make(tf.zeros([n], tf.float32), name) if bias else None

        chain = (1,) + self.channels
        self.encoder = []
        for i, (cin, cout) in enumerate(zip(chain[:-1], chain[1:])):
            self.encoder.append((weight([3, cin, cout], 3 * cin, 3 * cout, f"enc{i}_w"),
                                 zeros(cout, f"enc{i}_b")))
        lc = self.latent_channels
        self.encoder.append((weight([1, chain[-1], lc], chain[-1], lc, "enc_latent_w"),
                             zeros(lc, "enc_latent_b")))
        self.decoders = []
        back = tuple(reversed(chain))  # c3, c2, c1, c0, 1
        for d in range(self.num_decoders):
            layers = [(weight([1, lc, back[0]], lc, back[0], f"dec{d}_latent_w"),
                       zeros(back[0], f"dec{d}_latent_b"))]
            for i, (cin, cout) in enumerate(zip(back[:-1], back[1:])):
                # conv1d_transpose filters are [width, out, in]
                layers.append((weight([3, cout, cin], 3 * cin, 3 * cout, f"dec{d}_{i}_w"),
                               zeros(cout, f"dec{d}_{i}_b")))
            self.decoders.append(layers)
        self.weights = [v for layer in self.encoder + sum(self.decoders, [])
                        for v in layer if v is not None]
        self.adam_m = [make(tf.zeros_like(w), "adam_m") for w in self.weights]
        self.adam_v = [make(tf.zeros_like(w), "adam_v") for w in self.weights]
        self.adam_t = make(tf.constant(0, tf.int64), "adam_t")

    @property
    def variables_all(self):
        return self.weights + self.adam_m + self.adam_v + [self.adam_t]

    def _act(self, x):
        return tf.nn.leaky_relu(x, 0.2) if self.kind == "nonlinear" else x

    @staticmethod
    def _add(x, b):
        return x if b is None else x + b

    def encode(self, v):
        """v: float32 [B, L] -> latent float32 [B, latent_length(L)]."""
        v = tf.convert_to_tensor(v, tf.float32)
        n = v.shape[-1]
        padded = -(-n // MULTIPLE) * MULTIPLE
        x = tf.expand_dims(tf.pad(v, [[0, 0], [0, padded - n]]), -1)
        for i, (w, b) in enumerate(self.encoder):
            last = i == len(self.encoder) - 1
            x = self._add(tf.nn.conv1d(x, w, 1 if last else 2, "SAME"), b)
            if not last:
                x = self._act(x)
        return tf.reshape(x, [-1, (padded // MULTIPLE) * self.latent_channels])

    def decode(self, z, n, node=0):
        """z: float32 [B, latent_length(n)] -> [B, n], with decoder `node`."""
        z = tf.convert_to_tensor(z, tf.float32)
        length = -(-n // MULTIPLE)
        x = tf.reshape(z, [-1, length, self.latent_channels])
        layers = self.decoders[node]
        w, b = layers[0]
        x = self._act(self._add(tf.nn.conv1d(x, w, 1, "SAME"), b))
        batch = tf.shape(x)[0]
        for i, (w, b) in enumerate(layers[1:]):
            length *= 2
            x = tf.nn.conv1d_transpose(x, w, tf.stack([batch, length, w.shape[1]]), 2, "SAME")
            x = self._add(x, b)
            if i < len(layers) - 2:
                x = self._act(x)
        return tf.reshape(x, [-1, length])[:, :n]

    def train_step(self, loss_fn):
        """One Adam step on loss_fn() (a scalar of the weights). Returns the
        loss before the step; the update happens before it is returned."""
        with tf.GradientTape() as tape:
            for w in self.weights:
                tape.watch(w)
            loss = loss_fn()
        grads = tape.gradient(loss, self.weights)
        b1, b2, eps = ADAM
        t = tf.cast(self.adam_t.assign_add(1), tf.float32)
        lr = self.lr * tf.sqrt(1.0 - tf.pow(b2, t)) / (1.0 - tf.pow(b1, t))
        updates = []
        for w, g, m, v in zip(self.weights, grads, self.adam_m, self.adam_v):
            g = tf.zeros_like(w) if g is None else g
            m_new = m.assign(b1 * m + (1.0 - b1) * g)
            v_new = v.assign(b2 * v + (1.0 - b2) * tf.square(g))
            updates.append(w.assign_sub(lr * m_new / (tf.sqrt(v_new) + eps), read_value=False))
        updates = [u for u in updates if u is not None]
        if updates and not tf.executing_eagerly():
            with tf.control_dependencies(updates):
                return tf.identity(loss)
        return loss

    def flat_weights(self):
        """Every weight, flattened and concatenated (float32)."""
        return tf.concat([tf.reshape(w, [-1]) for w in self.weights], 0)

    def num_weights(self):
        return int(sum(w.shape.num_elements() for w in self.weights))

    def assign_flat(self, flat):
        """Assigns flat_weights()-shaped values; returns the ops."""
        ops, start = [], 0
        for w in self.weights:
            size = w.shape.num_elements()
            ops.append(w.assign(tf.reshape(flat[start:start + size], w.shape), read_value=False))
            start += size
        return [o for o in ops if o is not None]
