"""Transformer model builders: BERT-base (chatbot), GPT-2 XL (translation), ViT-Huge/14 (remote_sensing).

Weights are normal(0, 0.02) as in the original initialisations (GPT-2 scales its residual
output projections by 1/sqrt(2 * layers)); LayerNorm scales are 1 and biases 0. Attention is
written out with MatMul/Softmax (see ``layers.attention``); GELU is the exact Erf form.
"""

from __future__ import annotations

import math

import numpy as np

from .layers import FLOAT, INT64, GraphBuilder, attention, layer_norm, linear, mlp


def bert(
    g: GraphBuilder,
    layers: int = 12,
    d: int = 768,
    heads: int = 12,
    head_dim: int = 64,
    ffn: int = 3072,
    vocab: int = 30522,
    max_pos: int = 512,
    seq: int = 128,
    embed_dim: int | None = None,
) -> None:
    """BERT encoder (post-LN) with a question-answering head (start/end logits per token).

    ``embed_dim`` factorises the word embedding into [vocab, embed_dim] x [embed_dim, d] (as
    ALBERT does): the tiny variant keeps BERT's whole vocabulary (so real tokenizer output is
    valid input) and hidden size 768 in a few MB.
    """
    ids = g.input("input_ids", INT64, ["batch", seq])
    am = g.input("attention_mask", INT64, ["batch", seq])
    if embed_dim:
        e = g.op("Gather", g.param("embeddings.word_embeddings.weight", (vocab, embed_dim)), ids)
        e = g.op("MatMul", e, g.param("embeddings.word_projection.weight", (embed_dim, d), std=1.0 / math.sqrt(embed_dim)))
    else:
        e = g.op("Gather", g.param("embeddings.word_embeddings.weight", (vocab, d)), ids)
    pos = g.op("Gather", g.param("embeddings.position_embeddings.weight", (max_pos, d)), g.const(np.arange(seq)))
    typ = g.op("Gather", g.param("embeddings.token_type_embeddings.weight", (2, d)), g.const(0))  # one segment
    x = layer_norm(g, g.op("Add", g.op("Add", e, pos), typ), "embeddings.LayerNorm", d, eps=1e-12)
    # attention_mask 1 = attend, 0 = padding -> additive mask [b, 1, 1, seq] of 0 / -10000
    m = g.op("Mul", g.op("Sub", g.scalar(1.0), g.op("Cast", am, to=FLOAT)), g.scalar(-10000.0))
    mask = g.op("Unsqueeze", m, g.const([1, 2]))
    for i in range(layers):
        p = f"encoder.layer.{i}"
        a = attention(g, x, f"{p}.attention", d, heads, head_dim, mask=mask)
        x = layer_norm(g, g.op("Add", x, a), f"{p}.attention.LayerNorm", d, eps=1e-12)
        f = mlp(g, x, f"{p}.mlp", d, ffn)
        x = layer_norm(g, g.op("Add", x, f), f"{p}.output.LayerNorm", d, eps=1e-12)
    g.output(x, "last_hidden_state", FLOAT, ["batch", seq, d])
    qa = linear(g, x, "qa_outputs", d, 2, std=0.02)
    g.output(g.op("Gather", qa, g.const(0), axis=2), "start_logits", FLOAT, ["batch", seq])
    g.output(g.op("Gather", qa, g.const(1), axis=2), "end_logits", FLOAT, ["batch", seq])


def gpt2(
    g: GraphBuilder,
    layers: int = 48,
    d: int = 1600,
    heads: int = 25,
    vocab: int = 50257,
    max_pos: int = 1024,
    seq: int = 128,
    ffn: int | None = None,
    head_dim: int | None = None,
) -> None:
    """GPT-2 decoder (pre-LN, causal) whose LM head is tied to the token embedding (Gemm with
    transB on ``wte``). Outputs the logits and, with ArgMax over the vocabulary inside the graph,
    one greedy next token per position."""
    head_dim = head_dim or d // heads
    ids = g.input("input_ids", INT64, ["batch", seq])
    wte = g.param("wte.weight", (vocab, d))
    wpe = g.param("wpe.weight", (max_pos, d), std=0.01)
    x = g.op("Add", g.op("Gather", wte, ids), g.op("Gather", wpe, g.const(np.arange(seq))))
    causal = np.triu(np.full((seq, seq), -1e9, np.float32), 1)[None, None]
    mask = g.const(causal, np.float32)
    out_std = 0.02 / math.sqrt(2 * layers)
    for i in range(layers):
        p = f"h.{i}"
        a = attention(g, layer_norm(g, x, f"{p}.ln_1", d), f"{p}.attn", d, heads, head_dim, mask=mask, fused_qkv=True, out_std=out_std)
        x = g.op("Add", x, a)
        x = g.op("Add", x, mlp(g, layer_norm(g, x, f"{p}.ln_2", d), f"{p}.mlp", d, ffn or 4 * d, out_std=out_std))
    x = layer_norm(g, x, "ln_f", d)
    flat = g.op("Reshape", x, g.const([-1, d]))
    logits = g.op("Reshape", g.op("Gemm", flat, wte, transB=1), g.const([-1, seq, vocab]))
    g.output(g.op("ArgMax", logits, axis=-1, keepdims=0), "next_token_ids", INT64, ["batch", seq])
    g.output(logits, "logits", FLOAT, ["batch", seq, vocab])


def vit(
    g: GraphBuilder,
    layers: int = 32,
    d: int = 1280,
    heads: int = 16,
    mlp_dim: int = 5120,
    patch: int = 14,
    image: int = 224,
    classes: int = 1000,
    head_dim: int | None = None,
) -> None:
    """Vision Transformer (torchvision layout): patch-embedding conv, class token, learned
    position embedding, pre-LN encoder blocks, classifier on the class token."""
    head_dim = head_dim or d // heads
    x = g.input("image", FLOAT, ["batch", 3, image, image])
    n = (image // patch) ** 2
    w = g.param("conv_proj.weight", (d, 3, patch, patch), std=math.sqrt(1.0 / (3 * patch * patch)))
    b = g.param("conv_proj.bias", (d,), init="zeros")
    p = g.op("Conv", x, w, b, kernel_shape=[patch, patch], strides=[patch, patch])
    p = g.op("Transpose", g.op("Reshape", p, g.const([0, d, n])), perm=[0, 2, 1])  # [b, n, d]
    batch = g.op("Shape", p, start=0, end=1)
    cls = g.op("Expand", g.param("class_token", (1, 1, d)), g.op("Concat", batch, g.const([1, d]), axis=0))
    x = g.op("Add", g.op("Concat", cls, p, axis=1), g.param("encoder.pos_embedding", (1, n + 1, d)))
    for i in range(layers):
        q = f"encoder.layers.{i}"
        x = g.op(
            "Add", x, attention(g, layer_norm(g, x, f"{q}.ln_1", d, eps=1e-6), f"{q}.self_attention", d, heads, head_dim, fused_qkv=True)
        )
        x = g.op("Add", x, mlp(g, layer_norm(g, x, f"{q}.ln_2", d, eps=1e-6), f"{q}.mlp", d, mlp_dim))
    x = layer_norm(g, x, "encoder.ln", d, eps=1e-6)
    c = g.op("Gather", x, g.const(0), axis=1)  # the class token, [b, d]
    hw = g.param("heads.head.weight", (d, classes), std=1.0 / math.sqrt(d))
    hb = g.param("heads.head.bias", (classes,), init="zeros")
    g.output(g.op("Gemm", c, hw, hb), "logits", FLOAT, ["batch", classes])
