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


def _glorot(rng, shape, fan_in, fan_out, gain=1.0):
    limit = gain * np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, shape).astype(np.float32)


def random_init(channels, latent_channels, rng, gain=1.0):
    """Glorot-uniform weights: {'enc': [5 filters], 'dec': [5 filters]}
    (conv1d filters [width, in, out]; conv1d_transpose [width, out, in])."""
    chain = (1,) + tuple(channels)
    lc = latent_channels
    enc = [_glorot(rng, [3, a, b], 3 * a, 3 * b, gain) for a, b in zip(chain[:-1], chain[1:])]
    enc.append(_glorot(rng, [1, chain[-1], lc], chain[-1], lc, gain))
    back = tuple(reversed(chain))
    dec = [_glorot(rng, [1, lc, back[0]], lc, back[0], gain)]
    dec += [_glorot(rng, [3, b, a], 3 * a, 3 * b, gain) for a, b in zip(back[:-1], back[1:])]
    return {"enc": enc, "dec": dec}


def polyphase_init(kind, channels, latent_channels, rng):
    """Weights that make decode(encode(v)) = v at the start (for the first
    latent_channels of every 16 consecutive values when latent_channels <
    16), plus small random weights elsewhere.

    Encoder layer i turns 2^i consecutive values per position into 2^(i+1)
    (a stride-2 space-to-depth: taps 0 and 1 of the kernel), the latent keeps
    the first latent_channels of the 16, and the decoder undoes it with
    transposed convolutions. With LeakyReLU(a) every value travels as a pair
    (x, -x): lrelu(x) - lrelu(-x) = (1 + a) x, so the next layer reads it back
    with weights +-1/(1 + a). Needs channels[i] >= 2^(i+1) (twice that with
    LeakyReLU).

    Why: an autoencoder trained online for a few hundred steps from random
    weights reproduces a gradient's top-k values badly (docs/lgc.md); from
    here training only has to learn what to change.
    """
    pair = kind == "nonlinear"
    width = 2 if pair else 1
    need = [width * 2 ** (i + 1) for i in range(STRIDE_LAYERS)]
    if any(c < n for c, n in zip(channels, need)):
        raise ValueError(f"lgc_channels {','.join(map(str, channels))} are too narrow to start "
                         f"as the identity (need at least {','.join(map(str, need))} with "
                         f"{'LeakyReLU' if pair else 'linear layers'})")
    w = random_init(channels, latent_channels, rng, gain=0.001)
    g = 1.0 / 1.2 if pair else 1.0  # LeakyReLU(0.2) pairs read back

    def write(f, tap, src, dst, first_in=False, last_out=False):
        # value `src` (a pair, or a raw channel when first_in) -> value `dst`
        if not pair:
            f[tap, src, dst] += 1.0
            return
        ins = [(src, 1.0)] if first_in else [(2 * src, g), (2 * src + 1, -g)]
        outs = [(dst, 1.0)] if last_out else [(2 * dst, 1.0), (2 * dst + 1, -1.0)]
        for ci, a in ins:
            for co, b in outs:
                f[tap, ci, co] += a * b

    for i in range(STRIDE_LAYERS):  # encoder: (pos 2t + j, value q) -> (pos t, q + j P)
        f = w["enc"][i]
        p_in = 2 ** i
        for j in (0, 1):
            for q in range(p_in):
                write(f, j, q, q + j * p_in, first_in=(i == 0))
    lc = min(latent_channels, MULTIPLE)
    for c in range(lc):  # the latent: the first lc of the 16 values, raw
        write(w["enc"][STRIDE_LAYERS], 0, c, c, last_out=True)
    dec = w["dec"]
    for c in range(lc):  # decoder 1x1: raw latent -> pairs
        if pair:
            dec[0][0, c, 2 * c] += 1.0
            dec[0][0, c, 2 * c + 1] -= 1.0
        else:
            dec[0][0, c, c] += 1.0
    for i in range(STRIDE_LAYERS):  # (pos t, value p) -> (pos 2t + p // P, value p % P)
        f = dec[1 + i]  # [width, out, in]
        p_out = 2 ** (STRIDE_LAYERS - 1 - i)
        last = i == STRIDE_LAYERS - 1
        for p in range(2 * p_out):
            j, q = divmod(p, p_out)
            src = [(2 * p, g), (2 * p + 1, -g)] if pair else [(p, 1.0)]
            dst = [(q, 1.0)] if (last or not pair) else [(2 * q, 1.0), (2 * q + 1, -1.0)]
            for ci, a in src:
                for co, b in dst:
                    f[j, co, ci] += a * b
    return w


class Autoencoder(tf.Module):
    """encode(v [B, L]) -> z [B, latent_length(L)]; decode(z, node) -> [B, L].

    Args:
      kind: 'nonlinear' or 'linear' (see the module docstring).
      decoders: number of decoders (nodes for PS, 1 for RAR).
      channels: the four channel counts of the strided layers.
      latent_channels: channels of the latent.
      lr: Adam's learning rate.
      seed: initial weights (from numpy: the same on every worker).
      variable_factory: callable(initial_value, name) -> tf.Variable.
      identity_init: start as the identity (polyphase_init) instead of
        Glorot-uniform weights.
    """

    def __init__(self, kind, decoders, channels, latent_channels, lr, seed, variable_factory,
                 identity_init=False, name="lgc_autoencoder"):
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

        def zeros(n, name):
            return make(tf.zeros([n], tf.float32), name) if bias else None

        chain = (1,) + self.channels
        lc = self.latent_channels
        back = tuple(reversed(chain))  # c3, c2, c1, c0, 1
        init = (polyphase_init(kind, self.channels, lc, rng) if identity_init
                else random_init(self.channels, lc, rng))
        self.encoder = []
        for i, cout in enumerate(chain[1:] + (lc,)):
            self.encoder.append((make(tf.constant(init["enc"][i]), f"enc{i}_w"),
                                 zeros(cout, f"enc{i}_b")))
        self.decoders = []
        for d in range(self.num_decoders):
            layers = []
            for i, cout in enumerate(back):
                layers.append((make(tf.constant(init["dec"][i]), f"dec{d}_{i}_w"),
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
