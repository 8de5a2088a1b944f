"""Vision (and tabular) model builders: logistic regression, ResNet, YOLOv3, FCN, EfficientNet.

Each builder takes a :class:`~nearfaas.models.layers.GraphBuilder` and keyword options (the
size's configuration, see ``catalog.py``) and adds the graph's inputs, nodes and outputs.
BatchNorm is folded into each conv's weights and bias (the inference form); images are float32
NCHW with a symbolic batch dimension first.
"""

from __future__ import annotations

import math

from .layers import FLOAT, GraphBuilder, activation, conv

RES_GAIN = 0.25  # gain of a residual branch's last conv: keeps deep stacks' activations finite


def dense(g: GraphBuilder, x: str, name: str, din: int, dout: int) -> str:
    """Gemm classifier layer on [b, din]; weights stored [din, dout]."""
    w = g.param(f"{name}.weight", (din, dout), std=1.0 / math.sqrt(din))
    b = g.param(f"{name}.bias", (dout,), init="zeros")
    return g.op("Gemm", x, w, b)


def image_input(g: GraphBuilder, image: int) -> str:
    return g.input("image", FLOAT, ["batch", 3, image, image])


def pool_flatten(g: GraphBuilder, x: str) -> str:
    return g.op("Flatten", g.op("GlobalAveragePool", x), axis=1)


# -- logistic regression (credit_risk) ---------------------------------------------------------


def logreg(g: GraphBuilder, features: int = 200) -> None:
    x = g.input("features", FLOAT, ["batch", features])
    w = g.param("linear.weight", (features, 1), std=1.0 / math.sqrt(features))
    b = g.param("linear.bias", (1,), init="zeros")
    p = g.op("Sigmoid", g.op("Add", g.op("MatMul", x, w), b))
    g.output(p, "probability", FLOAT, ["batch", 1])


# -- ResNet (asset_damage) and its use as FCN's backbone ----------------------------------------


def bottleneck(g: GraphBuilder, x: str, name: str, cin: int, planes: int, stride: int, dilation: int) -> str:
    """torchvision's Bottleneck (v1.5: the stride is on the 3x3 conv)."""
    out = planes * 4
    y = conv(g, x, f"{name}.conv1", cin, planes, 1)
    y = conv(g, y, f"{name}.conv2", planes, planes, 3, stride=stride, dilation=dilation)
    y = conv(g, y, f"{name}.conv3", planes, out, 1, act=None, gain=RES_GAIN)
    if stride != 1 or cin != out:
        x = conv(g, x, f"{name}.downsample", cin, out, 1, stride=stride, act=None)
    return g.op("Relu", g.op("Add", y, x))


def resnet_backbone(
    g: GraphBuilder, x: str, blocks: tuple[int, ...], width: int, dilate: tuple[bool, bool, bool] = (False, False, False)
) -> list[tuple[str, int]]:
    """Stem + four stages; returns each stage's (output, channels). ``dilate`` replaces the
    stride of stages 2-4 with dilation, as torchvision's ``replace_stride_with_dilation``."""
    y = conv(g, x, "conv1", 3, width, 7, stride=2, pad=3)
    y = g.op("MaxPool", y, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin, dilation, stages = width, 1, []
    for i, n in enumerate(blocks):
        planes = width * 2**i
        stride = 1 if i == 0 else 2
        previous = dilation
        if i > 0 and dilate[i - 1]:
            dilation *= stride
            stride = 1
        for j in range(n):
            y = bottleneck(g, y, f"layer{i + 1}.{j}", cin, planes, stride if j == 0 else 1, previous if j == 0 else dilation)
            cin = planes * 4
        stages.append((y, cin))
    return stages


def resnet(g: GraphBuilder, blocks=(3, 4, 6, 3), width: int = 64, classes: int = 1000, image: int = 224) -> None:
    x = image_input(g, image)
    y, ch = resnet_backbone(g, x, tuple(blocks), width)[-1]
    g.output(dense(g, pool_flatten(g, y), "fc", ch, classes), "logits", FLOAT, ["batch", classes])


# -- FCN (clinical_analysis) -------------------------------------------------------------------

FCN_BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}


def fcn_head(g: GraphBuilder, x: str, name: str, cin: int, classes: int) -> str:
    """torchvision's FCNHead: 3x3 conv to cin/4 (+BN, ReLU; dropout is a no-op at inference), 1x1 to classes."""
    y = conv(g, x, f"{name}.0", cin, cin // 4, 3)
    return conv(g, y, f"{name}.4", cin // 4, classes, 1, act=None)


def fcn(g: GraphBuilder, depth: int = 101, blocks=None, width: int = 64, classes: int = 3, image: int = 224, aux: bool = True) -> None:
    """FCN with a dilated ResNet backbone (output stride 8), bilinear upsampling back to the
    input size (Resize), and torchvision's auxiliary head on stage 3 as a second output."""
    x = image_input(g, image)
    stages = resnet_backbone(g, x, tuple(blocks or FCN_BLOCKS[depth]), width, dilate=(False, True, True))
    up = g.const([1.0, 1.0, 8.0, 8.0], "float32")

    def upsample(y: str) -> str:
        return g.op("Resize", y, "", up, mode="linear", coordinate_transformation_mode="half_pixel")

    (c3, ch3), (c4, ch4) = stages[2], stages[3]
    g.output(upsample(fcn_head(g, c4, "classifier", ch4, classes)), "out", FLOAT, ["batch", classes, image, image])
    if aux:
        g.output(upsample(fcn_head(g, c3, "aux_classifier", ch3, classes)), "aux", FLOAT, ["batch", classes, image, image])


# -- YOLOv3: Darknet-53 and three detection heads (ppe_detection) -------------------------------


def darknet53(g: GraphBuilder, x: str, width: int, blocks: tuple[int, ...]) -> list[tuple[str, int]]:
    """Returns the outputs of the stages at stride 8, 16 and 32 with their channels."""
    y = conv(g, x, "darknet.conv0", 3, width, 3, act="leaky")
    ch, outs = width, []
    for i, n in enumerate(blocks):
        c = width * 2 ** (i + 1)
        y = conv(g, y, f"darknet.stage{i}.down", ch, c, 3, stride=2, act="leaky")
        for j in range(n):
            r = conv(g, y, f"darknet.stage{i}.{j}.conv1", c, c // 2, 1, act="leaky")
            r = conv(g, r, f"darknet.stage{i}.{j}.conv2", c // 2, c, 3, act="leaky", gain=RES_GAIN)
            y = g.op("Add", y, r)
        ch = c
        outs.append((y, c))
    return outs[2:]


def yolo_head(g: GraphBuilder, x: str, name: str, cin: int, c: int, anchors_out: int) -> tuple[str, str]:
    """Five alternating 1x1/3x3 convs (the route), then 3x3 and the 1x1 detection conv."""
    y, ch = x, cin
    for i in range(5):
        k, cout = (1, c) if i % 2 == 0 else (3, 2 * c)
        y, ch = conv(g, y, f"{name}.{i}", ch, cout, k, act="leaky"), cout
    out = conv(g, conv(g, y, f"{name}.5", c, 2 * c, 3, act="leaky"), f"{name}.out", 2 * c, anchors_out, 1, act=None)
    return y, out


def yolov3(g: GraphBuilder, width: int = 32, blocks=(1, 2, 8, 8, 4), classes: int = 80, image: int = 416) -> None:
    x = image_input(g, image)
    (s8, c8), (s16, c16), (s32, c32) = darknet53(g, x, width, tuple(blocks))
    a = 3 * (classes + 5)  # 255: three anchors x (4 box + 1 objectness + 80 classes)
    up = g.const([1.0, 1.0, 2.0, 2.0], "float32")

    def lateral(y: str, name: str, cin: int, cout: int, skip: str) -> str:
        y = conv(g, y, name, cin, cout, 1, act="leaky")
        y = g.op("Resize", y, "", up, mode="nearest")
        return g.op("Concat", y, skip, axis=1)

    r32, o32 = yolo_head(g, s32, "head32", c32, c32 // 2, a)
    r16, o16 = yolo_head(g, lateral(r32, "lateral16", c32 // 2, c32 // 4, s16), "head16", c32 // 4 + c16, c32 // 4, a)
    _, o8 = yolo_head(g, lateral(r16, "lateral8", c32 // 4, c32 // 8, s8), "head8", c32 // 8 + c8, c32 // 8, a)
    for out, stride in ((o8, 8), (o16, 16), (o32, 32)):  # the 52x52 head first, as in Table 1
        n = image // stride
        g.output(out, f"detections_{n}", FLOAT, ["batch", a, n, n])


# -- EfficientNet (content_moderation) ---------------------------------------------------------

# B0's stages: (expand ratio, kernel, stride, in channels, out channels, repeats)
EFFICIENTNET_B0 = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
                   (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1))  # fmt: skip
# (width, depth) multipliers of the B-variants
EFFICIENTNET_VARIANTS = {"b0": (1.0, 1.0), "b1": (1.0, 1.1), "b2": (1.1, 1.2), "b3": (1.2, 1.4), "b4": (1.4, 1.8)}


def round_filters(c: float, width: float, divisor: int = 8) -> int:
    v = c * width
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def mbconv(g: GraphBuilder, x: str, name: str, cin: int, cout: int, expand: int, k: int, stride: int) -> str:
    """MBConv: expand 1x1, depthwise kxk, squeeze-and-excitation, project 1x1 (+ residual)."""
    exp = cin * expand
    y = conv(g, x, f"{name}.expand", cin, exp, 1, act="silu") if expand != 1 else x
    y = conv(g, y, f"{name}.dw", exp, exp, k, stride=stride, groups=exp, act="silu")
    sq = max(1, cin // 4)
    s = g.op("GlobalAveragePool", y)
    s = conv(g, s, f"{name}.se.fc1", exp, sq, 1, act="silu")
    s = conv(g, s, f"{name}.se.fc2", sq, exp, 1, act="sigmoid")
    y = g.op("Mul", y, s)
    residual = stride == 1 and cin == cout
    y = conv(g, y, f"{name}.project", exp, cout, 1, act=None, gain=RES_GAIN if residual else 1.0)
    return g.op("Add", y, x) if residual else y


def efficientnet(g: GraphBuilder, variant: str = "b3", width=None, depth=None, classes: int = 1000, image: int = 227) -> None:
    w, d = EFFICIENTNET_VARIANTS[variant]
    w, d = width or w, depth or d
    x = image_input(g, image)
    ch = round_filters(32, w)
    y = conv(g, x, "stem", 3, ch, 3, stride=2, act="silu")
    n = 0
    for expand, k, stride, _cin, cout, repeats in EFFICIENTNET_B0:
        cout = round_filters(cout, w)
        for j in range(math.ceil(repeats * d)):
            y = mbconv(g, y, f"blocks.{n}", ch, cout, expand, k, stride if j == 0 else 1)
            ch, n = cout, n + 1
    head = 4 * ch
    y = conv(g, y, "head", ch, head, 1, act="silu")
    g.output(dense(g, pool_flatten(g, y), "classifier", head, classes), "logits", FLOAT, ["batch", classes])


__all__ = ["activation", "efficientnet", "fcn", "logreg", "resnet", "yolov3"]
