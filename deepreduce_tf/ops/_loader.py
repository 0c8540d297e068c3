"""Finds, checks and loads the compiled op library, once, on first use.

The library is compiled against one TensorFlow minor version; loading it into
another can crash the process, so the version recorded at build time is
compared with the running TensorFlow *before* the library is loaded. Any
failure raises a single OpLibraryError that lists the paths tried, both
versions and the command that rebuilds the library. There is no Python
fallback: an op that is not compiled is an error, not a slow path.

Where the library is looked for: at $DEEPREDUCE_TF_OPS_LIB when that is set
(and not empty), and then nowhere else: a path that does not exist or a
library that fails the checks is an error naming the variable, never a
silent fall-back to the library installed inside the package (which would
run other code than the developer asked for). Without the variable, the
package's own ops/_deepreduce_ops.so is loaded.

The library also reports the codec table it was compiled with (kernels/
common/codec_table.h); a library whose table differs from deepreduce_tf/ops/
codec_table.py (a stale build, a hand-edited header) is refused: its codec
ids would not be the ones the Python side writes and expects.
"""
import json
import os
import threading

LIB_NAME = "_deepreduce_ops"
ENV_PATH = "DEEPREDUCE_TF_OPS_LIB"
REBUILD_COMMAND = ("pip install --no-build-isolation --force-reinstall --no-deps "
                   "<path to the deepreduce_tf source tree>   "
                   "(or, inside the tree: bash build_deps/dev.sh test)")

_lock = threading.Lock()
_module = None
_build_info = None


class OpLibraryError(ImportError):
    """The op library is missing, unloadable, or built for another TensorFlow."""


def _override():
    """The absolute path $DEEPREDUCE_TF_OPS_LIB names, or None if unset/empty."""
    path = os.environ.get(ENV_PATH)
    return os.path.abspath(path) if path else None


def _candidates(override=None):
    """The one library to load: the override, else the package's own."""
    override = override or _override()
    if override:
        return [override]
    return [os.path.join(os.path.dirname(os.path.abspath(__file__)), LIB_NAME + ".so")]


def _minor(version):
    return ".".join(str(version).split(".")[:2])


def _read_sidecar(path):
    info_path = os.path.splitext(path)[0] + ".json"
    try:
        with open(info_path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _fail(tried, running, built=None, override=None):
    lines = ["deepreduce_tf could not load its op library."]
    if override:
        lines.append(f"{ENV_PATH} is set to {override}, so that library alone is tried "
                     "(not the one installed with the package): fix the path, or unset "
                     f"{ENV_PATH} to use the package's own library.")
    lines.append("Paths tried:")
    lines += [f"  {p}: {why}" for p, why in tried]
    lines.append(f"Running TensorFlow: {running}; library built for TensorFlow: "
                 f"{built or 'unknown'}.")
    lines.append(f"Rebuild it with: {REBUILD_COMMAND}")
    if not override:
        lines.append(f"(set {ENV_PATH} to load a library from another path)")
    raise OpLibraryError("\n".join(lines))


def load():
    """Returns the loaded op module (generated wrappers), loading it once."""
    # Plain Python (file checks, locking): keep AutoGraph from converting it
    # when the first op call happens inside a tf.function.
    return _load_unconverted()


def _load():
    global _module, _build_info
    if _module is not None:
        return _module
    with _lock:
        if _module is not None:
            return _module
        import tensorflow as tf

        running = tf.__version__
        tried = []
        built = None
        override = _override()
        for path in _candidates(override):
            if not os.path.exists(path):
                tried.append((path, "no such file"))
                continue
            sidecar = _read_sidecar(path)
            if sidecar is None:
                tried.append((path, "no readable build record "
                              f"({os.path.splitext(path)[0]}.json) beside it"))
                continue
            built = sidecar.get("tf_version")
            if _minor(built) != _minor(running):
                tried.append((path, f"built for TensorFlow {built}, which is not "
                              f"ABI-compatible with the running {running}"))
                continue
            try:
                module = tf.load_op_library(path)
            except Exception as e:  # TF raises NotFoundError/InvalidArgument.
                tried.append((path, f"load failed: {type(e).__name__}: {e}"))
                continue
            try:
                info = json.loads(_run_build_info(tf, module).decode())
            except Exception as e:  # a library that loads but cannot run its ops
                tried.append((path, f"BuildInfo op failed: {type(e).__name__}: {e}"))
                continue
            if _minor(info["tf_version"]) != _minor(running):
                tried.append((path, f"binary reports TensorFlow {info['tf_version']}"))
                continue
            mismatch = codec_table_mismatch(info.get("codecs"))
            if mismatch:
                tried.append((path, mismatch))
                continue
            _build_info = info
            _module = module
            return module
        _fail(tried, running, built, override)


def codec_table_mismatch(compiled):
    """None if `compiled` (BuildInfo's "codecs") is the codec table of
    deepreduce_tf/ops/codec_table.py, else why not, in one line."""
    from deepreduce_tf.ops import codec_table

    expected = codec_table.build_info_table()
    if compiled == expected:
        return None
    if not isinstance(compiled, dict):
        return ("binary reports no codec table (built before "
                f"{codec_table.HEADER_PATH} existed)")
    diffs = []
    for kind in codec_table.KINDS:
        have, want = compiled.get(kind) or {}, expected[kind]
        for name in sorted(set(have) | set(want), key=lambda n: (n not in want, n)):
            if have.get(name) != want.get(name):
                diffs.append(f"{kind} codec {name!r}: wire id "
                             f"{'absent' if name not in have else have[name]} in the binary, "
                             f"{'absent' if name not in want else want[name]} in "
                             "codec_table.py")
    return ("binary was compiled with another codec table (" + "; ".join(diffs) + "); "
            f"regenerate {codec_table.HEADER_PATH} with `{codec_table.REGENERATE_HEADER}` "
            "and rebuild")


def _run_build_info(tf, module):
    """The BuildInfo op's JSON bytes, in whatever context the first op call
    happens: eagerly, while a tf.function is traced, inside a
    tf.Graph().as_default() block, or with eager execution disabled."""
    # A tf.function being traced: init_scope leaves its graph for the
    # outermost context, eager unless a tf.Graph is the default there.
    with tf.init_scope():
        if tf.executing_eagerly():
            return module.deep_reduce_build_info().numpy()
    # A TF1-style graph (eager disabled, or a tf.Graph made the default):
    # run the op in a private graph and session, so the caller's graph gains
    # no node and no session of the caller's is needed.
    graph = tf.Graph()
    with graph.as_default():
        info = module.deep_reduce_build_info()
    with tf.compat.v1.Session(graph=graph) as sess:
        return sess.run(info)


def _load_unconverted():
    import tensorflow as tf

    return tf.autograph.experimental.do_not_convert(_load)()


def build_info():
    """What the loaded binary reports about itself (version, TF, CUDA)."""
    load()
    return dict(_build_info)
