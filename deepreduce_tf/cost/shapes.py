"""The variable shapes of the benchmark models, as the cost model
(deepreduce_tf.cost) reads them: ResNet-20, ResNet-50, a GPT-style 1.3 B
layout. Plain data, standard library only.
"""


def resnet20_shapes(num_classes=10):
    """deepreduce_bench.models.resnet20: 3 stages of 3 basic blocks; every conv
    has no bias and is followed by batch norm (gamma, beta); identity
    shortcuts are padded, parameter-free. 59 tensors, 269,722 elements."""
    shapes = [(3, 3, 3, 16), (16,), (16,)]
    cin = 16
    for filters in (16, 32, 64):
        for _ in range(3):
            shapes += [(3, 3, cin, filters), (filters,), (filters,),
                       (3, 3, filters, filters), (filters,), (filters,)]
            cin = filters
    return shapes + [(64, num_classes), (num_classes,)]


def resnet50_shapes(num_classes=1000):
    """ResNet-50 v1.5 (deepreduce_bench.models.resnet50, torchvision's layout):
    161 tensors, 25,557,032 elements."""
    shapes = [(7, 7, 3, 64), (64,), (64,)]
    cin = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            shapes += [(1, 1, cin, width), (width,), (width,),
                       (3, 3, width, width), (width,), (width,),
                       (1, 1, width, 4 * width), (4 * width,), (4 * width,)]
            if b == 0:
                shapes += [(1, 1, cin, 4 * width), (4 * width,), (4 * width,)]
            cin = 4 * width
    return shapes + [(2048, num_classes), (num_classes,)]


def gpt_shapes(layers=24, width=2048, vocab=50257, context=2048):
    """The GPT-style 1.3 B layout of benchmarks/cuda/step_throughput.cu: token
    and position embeddings, per block LayerNorm, qkv, projection, LayerNorm,
    4x MLP (with biases), a final LayerNorm. 292 tensors, 1,315,723,264."""
    shapes = [(vocab, width), (context, width)]
    for _ in range(layers):
        shapes += [(width,), (width,), (width, 3 * width), (3 * width,),
                   (width, width), (width,), (width,), (width,),
                   (width, 4 * width), (4 * width,), (4 * width, width), (width,)]
    return shapes + [(width,), (width,)]
