"""Writes the table of TensorFlow's GPU kernels that tests/ops/test_gpu_placement.py
reads: for every op of TensorFlow's CUDA build that has a kernel on the GPU
(device type GPU, or DEFAULT: a kernel for every device), its kernels' type
constraints and host-memory arguments.

The test runs in tensorflow-cpu, whose registry has no GPU kernels of
TensorFlow's own ops, so the table is taken once from the `tensorflow` wheel
(the CUDA build; its registry fills at import, no GPU needed) of the version
the project pins:

    pip download --no-deps --only-binary=:all: tensorflow==2.21.0 -d /tmp/tfgpu_whl
    unzip -q /tmp/tfgpu_whl/tensorflow-*.whl 'tensorflow/*' -d /tmp/tfgpu
    PYTHONPATH=/tmp/tfgpu:$(echo .venv/lib/python3.11/site-packages) \\
        .venv/bin/python build_deps/tf_gpu_kernels.py tests/data/tf_gpu_kernels.json.gz
"""
import gzip
import json
import sys

import tensorflow as tf
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session
from tensorflow.python.framework import dtypes
from tensorflow.python.framework import kernels


def all_op_names():
    buf = pywrap_tf_session.TF_GetAllOpList()
    try:
        op_list = op_def_pb2.OpList()
        op_list.ParseFromString(pywrap_tf_session.TF_GetBuffer(buf))
    finally:
        pywrap_tf_session.TF_DeleteBuffer(buf)
    return sorted(op.name for op in op_list.op)


def main(out_path):
    if not tf.test.is_built_with_cuda():
        raise SystemExit("this TensorFlow is not a CUDA build: run it with the `tensorflow` "
                         "wheel first on PYTHONPATH (see the module docstring)")
    table = {}
    for name in all_op_names():
        entries = []
        for k in kernels.get_registered_kernels_for_op(name).kernel:
            if k.device_type not in ("GPU", "DEFAULT"):
                continue
            constraints = {c.name: sorted(dtypes.as_dtype(t).name
                                          for t in c.allowed_values.list.type)
                           for c in k.constraint}
            entries.append({"device": k.device_type, "constraints": constraints,
                            "host_memory": sorted(k.host_memory_arg)})
        if entries:
            entries.sort(key=lambda e: json.dumps(e, sort_keys=True))
            table[name] = entries
    doc = {"tensorflow": tf.__version__, "ops": table}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n"
    # mtime=0: the same table gives the same bytes.
    with open(out_path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as gz:
        gz.write(text.encode())
    print(f"{out_path}: {len(table)} ops with a GPU or DEFAULT kernel (TensorFlow {tf.__version__})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/tf_gpu_kernels.json.gz")
