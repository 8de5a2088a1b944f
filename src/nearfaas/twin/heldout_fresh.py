"""A second, FRESH held-out set for the CPU roofline check (the goal is judged on this one).

The first held-out set (``nearfaas.twin.heldout``, eleven networks) was measured and looked at
while the second attempt's changes were planned, so it can no longer tell whether those changes
generalise; it is still reported, as the "seen" set. This module fixes twelve OTHER networks in
code, with the same builders (``heldout.mlp``, ``vgg``, ``mobilenet_v1/v2``, ``resnet_blocks``,
``transformer``) at sizes and shapes neither set nor the apps use: other MLP widths and batch rows,
CNNs at 64/96/128 px with other channel plans, MobileNets at another width and resolution,
transformers at other d_model / sequence lengths. The definitions were written (and the plan in
the validation notes) before any of these networks was measured.

Example::

    from nearfaas.twin import heldout_fresh
    nets = heldout_fresh.build_all()          # {name: onnx.ModelProto}, deterministic (seeds 201-212)
    heldout.measure(1, nets)                  # measured as the first set is

Known caveats: the families are the first set's families (an MLP, a VGG-like CNN, ...): the set
tests other SIZES of the same op mix, not new operators.
"""

from __future__ import annotations

from collections.abc import Callable

from nearfaas.twin import heldout
from nearfaas.twin.heldout import digest, mlp, mobilenet_v1, mobilenet_v2, resnet_blocks, transformer, vgg

# name -> (family, builder). Seeds 201-212: no network shares weights with the first set (101-111).
NETWORKS: dict[str, tuple[str, Callable]] = {
    "mlp_gemv_wide": ("mlp", lambda: mlp("mlp_gemv_wide", 1, (2048, 8192, 2048), 201)),
    "mlp_gemv_mid": ("mlp", lambda: mlp("mlp_gemv_mid", 1, (512, 2048, 2048, 100), 202)),
    "mlp_batch16": ("mlp", lambda: mlp("mlp_batch16", 16, (512, 2048, 512, 10), 203)),
    "mlp_batch256": ("mlp", lambda: mlp("mlp_batch256", 256, (256, 512, 256, 10), 204)),
    "cnn_vgg96": ("cnn", lambda: vgg("cnn_vgg96", 96, ((48, 2), (96, 2), (192, 2)), 100, 205)),
    "cnn_vgg64_wide": ("cnn", lambda: vgg("cnn_vgg64_wide", 64, ((64, 2), (128, 2), (256, 2), (512, 1)), 10, 206)),
    "resnet_blocks_128": ("cnn", lambda: resnet_blocks("resnet_blocks_128", 128, 96, 3, 207)),
    "dwcnn_v1_w075": ("dwcnn", lambda: mobilenet_v1("dwcnn_v1_w075", 160, 0.75, 208)),
    "dwcnn_v2_160": ("dwcnn", lambda: mobilenet_v2("dwcnn_v2_160", 160, 209)),
    "transformer_tiny": ("transformer", lambda: transformer("transformer_tiny", 16, 64, 2, 2, 256, 210)),
    "transformer_seq64": ("transformer", lambda: transformer("transformer_seq64", 64, 256, 4, 3, 1024, 211)),
    "transformer_seq384": ("transformer", lambda: transformer("transformer_seq384", 384, 512, 8, 1, 2048, 212)),
}


def build(name: str):
    """The ONNX model of one fresh held-out network (deterministic: seeded weights)."""
    return heldout.build(name, NETWORKS, "fresh held-out")


def build_all() -> dict:
    return {n: build(n) for n in NETWORKS}


__all__ = ["NETWORKS", "build", "build_all", "digest"]
