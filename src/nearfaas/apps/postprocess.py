"""What f2 makes of a model's outputs (the summary in its answer and result object), and the
severity f3 gives the notification. Plain NumPy over the output arrays, one function per kind
of model: classification, detection, segmentation, question answering, next-token prediction,
and logistic regression.
"""

from __future__ import annotations

import numpy as np

from . import text as text_mod
from .catalog import AppCard

COCO_CLASSES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
    "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell phone",
    "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors", "teddy bear",
    "hair drier", "toothbrush",
)
# YOLOv3's anchors (pixels at 416 × 416), by the stride of the output grid they belong to.
YOLO_ANCHORS = {8: ((10, 13), (16, 30), (33, 23)), 16: ((30, 61), (62, 45), (59, 119)), 32: ((116, 90), (156, 198), (373, 326))}
SCORE_THRESHOLD = 0.5
IOU_THRESHOLD = 0.45
MAX_DETECTIONS = 50
SEVERITIES = ("info", "warning", "critical")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -60.0, 60.0)))


def _softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def probabilities(scores: np.ndarray) -> np.ndarray:
    """Class probabilities from a model's last layer: kept when they already are (non-negative,
    rows summing to 1), else a softmax over the logits."""
    x = np.asarray(scores, dtype=np.float64)
    x = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    if np.all(x >= 0) and np.allclose(x.sum(axis=-1), 1.0, atol=1e-3):
        return x
    return _softmax(x)


# ---------------------------------------------------------------- per kind

def classification(outputs: dict, card: AppCard, k: int = 5) -> dict:
    logits = next(iter(outputs.values()))
    p = probabilities(logits)[0]
    top = np.argsort(-p, kind="stable")[:k]
    return {"top5": [{"class": int(i), "label": _label(card, int(i)), "probability": round(float(p[i]), 6)} for i in top],
            "classes": int(p.size)}


def _label(card: AppCard, i: int) -> str:
    return card.labels[i] if i < len(card.labels) else f"imagenet:{i}"


def detection(outputs: dict, card: AppCard, input_size: int = 416, previous: dict | None = None) -> dict:
    """YOLOv3 heads ([1, 255, S, S] each: 3 anchors × (x, y, w, h, objectness, 80 classes)) →
    boxes in input pixels, score = objectness × class probability, thresholded, class-wise NMS;
    mapped back to the original image when f1's letterbox is known."""
    boxes, scores, classes = [], [], []
    for array in outputs.values():
        a = np.asarray(array, dtype=np.float32)
        if a.ndim == 3:
            a = a[None]
        if a.ndim != 4 or a.shape[1] % 85 or a.shape[2] != a.shape[3]:
            continue  # not a detection head
        grid = a.shape[2]
        stride = input_size / grid
        anchors = YOLO_ANCHORS[min(YOLO_ANCHORS, key=lambda s: abs(s - stride))]
        n_anchor = a.shape[1] // 85
        p = a[0].reshape(n_anchor, 85, grid, grid)
        gy, gx = np.meshgrid(np.arange(grid), np.arange(grid), indexing="ij")
        for k in range(n_anchor):
            obj = _sigmoid(p[k, 4])
            cls = _sigmoid(p[k, 5:])
            best = cls.argmax(axis=0)
            score = obj * np.take_along_axis(cls, best[None], axis=0)[0]
            keep = score >= SCORE_THRESHOLD
            if not keep.any():
                continue
            aw, ah = anchors[k % len(anchors)]
            cx = (_sigmoid(p[k, 0][keep]) + gx[keep]) * stride
            cy = (_sigmoid(p[k, 1][keep]) + gy[keep]) * stride
            w = np.exp(np.clip(p[k, 2][keep], -10, 10)) * aw
            h = np.exp(np.clip(p[k, 3][keep], -10, 10)) * ah
            boxes.append(np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1))
            scores.append(score[keep])
            classes.append(best[keep])
    if boxes:
        b, s, c = np.concatenate(boxes), np.concatenate(scores), np.concatenate(classes)
        keep = nms(b, s, c)
        b, s, c = b[keep], s[keep], c[keep]
    else:
        b, s, c = np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64)
    letter = (previous or {}).get("letterbox")
    frame = "input"
    if isinstance(letter, dict) and letter.get("scale"):
        b = (b - [letter.get("pad_x", 0), letter.get("pad_y", 0)] * 2) / float(letter["scale"])
        frame = "original"
    counts: dict[str, int] = {}
    for i in c:
        name = COCO_CLASSES[int(i)] if int(i) < len(COCO_CLASSES) else str(int(i))
        counts[name] = counts.get(name, 0) + 1
    detections = [{"class": COCO_CLASSES[int(ci)] if int(ci) < len(COCO_CLASSES) else str(int(ci)),
                   "score": round(float(si), 4), "box": [round(float(v), 1) for v in bi]}
                  for bi, si, ci in zip(b[:10], s[:10], c[:10], strict=True)]
    return {"detections": int(len(s)), "by_class": counts, "people": counts.get("person", 0), "top": detections,
            "box_frame": frame, "score_threshold": SCORE_THRESHOLD}


def nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou: float = IOU_THRESHOLD,
        limit: int = MAX_DETECTIONS) -> np.ndarray:
    """Class-wise greedy non-maximum suppression; indexes of the kept boxes, best first."""
    offset = classes.astype(np.float64)[:, None] * 1e5  # boxes of different classes never overlap
    b = boxes.astype(np.float64) + offset
    order = np.argsort(-scores, kind="stable")[: limit * 20]
    area = np.maximum(0, b[:, 2] - b[:, 0]) * np.maximum(0, b[:, 3] - b[:, 1])
    kept: list[int] = []
    while order.size and len(kept) < limit:
        i = int(order[0])
        kept.append(i)
        rest = order[1:]
        xx1, yy1 = np.maximum(b[i, 0], b[rest, 0]), np.maximum(b[i, 1], b[rest, 1])
        xx2, yy2 = np.minimum(b[i, 2], b[rest, 2]), np.minimum(b[i, 3], b[rest, 3])
        inter = np.maximum(0, xx2 - xx1) * np.maximum(0, yy2 - yy1)
        overlap = inter / np.maximum(area[i] + area[rest] - inter, 1e-9)
        order = rest[overlap <= iou]
    return np.asarray(kept, dtype=np.int64)


def segmentation(outputs: dict, card: AppCard) -> tuple[dict, np.ndarray]:
    """[1, C, H, W] class scores → the per-pixel argmax mask and each class's share of it."""
    scores = np.asarray(next(iter(outputs.values())))
    if scores.ndim == 3:
        scores = scores[None]
    mask = scores[0].argmax(axis=0).astype(np.uint8)
    counts = np.bincount(mask.reshape(-1), minlength=scores.shape[1])
    share = counts / max(1, mask.size)
    names = [card.labels[i] if i < len(card.labels) else f"class:{i}" for i in range(scores.shape[1])]
    histogram = {name: round(float(v), 6) for name, v in zip(names, share, strict=True)}
    salient = names.index("salient") if "salient" in names else len(names) - 1
    return {"mask_histogram": histogram, "mask_shape": list(mask.shape),
            "foreground_fraction": round(float(share[1:].sum()), 6), "salient_fraction": round(float(share[salient]), 6)}, mask


def question_answering(outputs: dict, meta: dict) -> dict:
    start, end = outputs.get("start_logits"), outputs.get("end_logits")
    if start is None or end is None:
        return {"answer": None, "note": "the model gave no start_logits/end_logits"}
    return text_mod.answer_span(start, end, meta)


def next_tokens(outputs: dict, meta: dict) -> dict:
    ids = outputs.get("next_token_ids")
    if ids is None:
        ids = next(iter(outputs.values()))
    return text_mod.token_preview(ids, meta)


def credit(outputs: dict, threshold: float = 0.5) -> dict:
    """Logistic regression scores ([N, 1]) → probability of a bad risk per application (a
    sigmoid when the model gives logits) and the decision at ``threshold``."""
    raw = np.asarray(next(iter(outputs.values())), dtype=np.float64).reshape(-1)
    p = raw if np.all((raw >= 0) & (raw <= 1)) else _sigmoid(raw)
    refer = p >= threshold
    shown = [{"record": i + 1, "probability": round(float(v), 6), "decision": "refer" if r else "approve"}
             for i, (v, r) in enumerate(zip(p[:20], refer[:20], strict=True))]
    return {"records": int(p.size), "refer": int(refer.sum()), "approve": int((~refer).sum()),
            "probability": round(float(p[0]), 6) if p.size else None, "threshold": threshold, "decisions": shown}


# ---------------------------------------------------------------- severity (f3)

def severity(app: str, summary: dict) -> str:
    """How urgent the notification is, from f2's summary: "info", "warning" or "critical"."""
    s = summary or {}
    if app == "credit_risk":
        records, refer = s.get("records") or 0, s.get("refer") or 0
        return "info" if not refer else ("critical" if records and refer / records > 0.5 else "warning")
    if app in ("asset_damage", "content_moderation", "remote_sensing"):
        top = (s.get("top5") or [{}])[0].get("probability") or 0.0
        return "critical" if top >= 0.8 else "warning" if top >= 0.5 else "info"
    if app == "ppe_detection":
        return "warning" if (s.get("people") or 0) > 0 else "info"
    if app == "clinical_analysis":
        share = s.get("salient_fraction") or 0.0
        return "critical" if share >= 0.25 else "warning" if share >= 0.05 else "info"
    return "info"  # chatbot, translation: a response, not an alert
