"""Sample inputs for the eight applications, made in code and deterministic by seed.

``make_input(app_key, seed)`` gives what a user would upload: a photo-like JPEG (drawn with
Pillow: sky, ground, shapes, sensor noise, plus what the application looks for), a 16-bit
grey-scale scan as PNG, loan applications as JSON lines, a question, or a page to translate.
The same seed always gives the same bytes (with the same Pillow and libjpeg).
"""

from __future__ import annotations

import io
import json
import math
import random

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from . import corpus, records
from .catalog import get_app

JPEG_QUALITY = 88


def make_input(app_key: str, seed: int = 0) -> tuple[bytes, str, str]:
    """(bytes, content type, object key suggestion) of a realistic input for the application."""
    card = get_app(app_key)
    maker = _MAKERS[card.key]
    data, content_type, name = maker(seed)
    return data, content_type, f"{card.slug}/{name}"


# ---------------------------------------------------------------- image helpers

def _jpeg(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=JPEG_QUALITY, optimize=False, progressive=False, subsampling="4:2:0")
    return buf.getvalue()


def _png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=False, compress_level=6)
    return buf.getvalue()


def _sky_and_ground(w: int, h: int, horizon: float, rng: np.random.Generator, ground=(96, 92, 80)) -> np.ndarray:
    """An RGB float array: a sky gradient above the horizon, a darkening ground below."""
    y = np.linspace(0.0, 1.0, h, dtype=np.float32)[:, None, None]
    top, low = np.array([70, 120, 190], np.float32), np.array([190, 210, 230], np.float32)
    t = np.clip(y / horizon, 0, 1)
    sky = top * (1 - t) + low * t
    g = np.array(ground, np.float32) * (1.15 - 0.5 * np.clip((y - horizon) / (1 - horizon), 0, 1))
    img = np.where(y < horizon, sky, g) * np.ones((1, w, 1), np.float32)
    img += rng.normal(0, 2.0, (1, w, 3)).astype(np.float32)  # column-wise tint: uneven light
    return img


def _noisy(arr: np.ndarray, rng: np.random.Generator, sigma: float) -> Image.Image:
    arr = arr + rng.normal(0.0, sigma, arr.shape).astype(np.float32)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")


def _timestamp(draw: ImageDraw.ImageDraw, text: str, xy=(8, 6)) -> None:
    x, y = xy
    draw.rectangle((x - 3, y - 2, x + 7 * len(text), y + 12), fill=(0, 0, 0))
    draw.text((x, y), text, fill=(235, 235, 235))


def _jagged(rng: random.Random, start: tuple[float, float], angle: float, length: float, steps: int) -> list[tuple[float, float]]:
    """A crack: a random walk in direction that keeps being pulled back to its heading."""
    x, y = start
    points = [(x, y)]
    step = length / steps
    heading = angle
    for _ in range(steps):
        angle += rng.uniform(-0.5, 0.5) + 0.5 * (heading - angle)
        x, y = x + step * math.cos(angle), y + step * math.sin(angle)
        points.append((x, y))
    return points


# ---------------------------------------------------------------- the applications

def _asset_damage(seed: int) -> tuple[bytes, str, str]:
    """A CCTV frame of a concrete pillar and pipework with a crack and rust streaks."""
    rng, r = np.random.default_rng(seed), random.Random(seed)
    w, h = 640, 480
    img = _noisy(_sky_and_ground(w, h, 0.42, rng), rng, 3.0)
    d = ImageDraw.Draw(img)
    px = r.randint(180, 300)
    d.rectangle((px, 60, px + 170, h), fill=(158, 156, 150), outline=(110, 108, 104), width=3)  # pillar
    for k in range(6):  # formwork lines
        yy = 90 + k * 65
        d.line((px, yy, px + 170, yy), fill=(140, 138, 133), width=2)
    d.rectangle((0, 300, w, 330), fill=(70, 90, 110))  # a pipe across the frame
    d.line((0, 302, w, 302), fill=(120, 140, 160), width=3)
    for _ in range(r.randint(2, 4)):  # rust streaks below the pipe
        x0 = r.randint(20, w - 20)
        d.line((x0, 330, x0 + r.randint(-6, 6), 330 + r.randint(20, 60)), fill=(130, 70, 35), width=r.randint(2, 5))
    crack = _jagged(r, (px + r.randint(40, 130), 80 + r.randint(0, 40)), math.pi / 2 + r.uniform(-0.5, 0.5), 330, 24)
    d.line(crack, fill=(35, 33, 30), width=4, joint="curve")
    for i in range(4, len(crack) - 2, 6):  # branches
        branch = _jagged(r, crack[i], r.uniform(0, 2 * math.pi), r.uniform(25, 60), 6)
        d.line(branch, fill=(45, 43, 40), width=2)
    img = img.filter(ImageFilter.GaussianBlur(0.6))
    _timestamp(ImageDraw.Draw(img), f"CAM 0{seed % 9 + 1}  2026-11-{10 + seed % 18:02d} 0{seed % 10}:14:{seed % 60:02d}")
    return _jpeg(img), "image/jpeg", f"cctv-{seed:04d}.jpg"


def _ppe_detection(seed: int) -> tuple[bytes, str, str]:
    """A factory floor with workers in vests; most wear hard hats (yellow, orange, white)."""
    rng, r = np.random.default_rng(seed), random.Random(seed)
    w, h = 960, 540
    arr = _sky_and_ground(w, h, 0.35, rng, ground=(120, 118, 112))
    arr[: int(h * 0.35)] = np.array([150, 150, 145], np.float32)  # the hall's back wall
    img = _noisy(arr, rng, 4.0)
    d = ImageDraw.Draw(img)
    for x in range(0, w, 120):  # wall panels and floor markings
        d.line((x, 0, x, int(h * 0.35)), fill=(120, 120, 116), width=3)
    d.line((0, int(h * 0.72), w, int(h * 0.72)), fill=(220, 190, 40), width=8)
    d.rectangle((40, 120, 260, 260), fill=(60, 80, 120), outline=(30, 40, 60), width=3)  # a machine
    for _ in range(r.randint(3, 6)):  # stacked crates
        cx, cy = r.randint(600, 900), r.randint(200, 300)
        d.rectangle((cx, cy, cx + 60, cy + 50), fill=(150, 110, 60), outline=(90, 60, 30), width=2)
    workers = r.randint(3, 6)
    for i in range(workers):
        x = 110 + i * (w - 220) // max(1, workers - 1) + r.randint(-30, 30)
        scale = r.uniform(0.8, 1.2)
        foot = int(h * r.uniform(0.78, 0.95))
        body_h, body_w = int(170 * scale), int(56 * scale)
        top = foot - body_h
        d.rectangle((x - body_w // 3, foot - body_h // 2, x - 4, foot), fill=(40, 50, 80))  # legs
        d.rectangle((x + 4, foot - body_h // 2, x + body_w // 3, foot), fill=(40, 50, 80))
        vest = r.choice([(250, 120, 20), (200, 230, 40), (250, 200, 30)])
        d.rounded_rectangle((x - body_w // 2, top + int(38 * scale), x + body_w // 2, foot - body_h // 2 + 10), 8, fill=vest)
        d.line((x - body_w // 2 + 6, top + int(70 * scale), x + body_w // 2 - 6, top + int(70 * scale)), fill=(230, 230, 230), width=4)
        head = int(17 * scale)
        hy = top + int(20 * scale)
        d.ellipse((x - head, hy - head, x + head, hy + head), fill=(200, 160, 130))  # face
        if r.random() < 0.8:  # a hard hat: a dome and a brim
            hat = r.choice([(245, 210, 20), (240, 120, 20), (240, 240, 235)])
            d.pieslice((x - head - 3, hy - head - 8, x + head + 3, hy + head - 6), 180, 360, fill=hat)
            d.line((x - head - 7, hy - 7, x + head + 7, hy - 7), fill=hat, width=4)
    img = img.filter(ImageFilter.GaussianBlur(0.7))
    _timestamp(ImageDraw.Draw(img), f"HALL B  CAM 2  shift {seed % 3 + 1}")
    return _jpeg(img), "image/jpeg", f"floor-{seed:04d}.jpg"


def _clinical_analysis(seed: int) -> tuple[bytes, str, str]:
    """A 16-bit grey-scale axial scan: body outline, organs, a bright lesion, speckle."""
    rng, r = np.random.default_rng(seed), random.Random(seed)
    n = 512
    y, x = np.mgrid[0:n, 0:n].astype(np.float32)
    cx, cy = n / 2 + r.uniform(-10, 10), n / 2 + r.uniform(-10, 10)
    rx, ry = n * 0.42, n * 0.34
    body = ((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2
    scan = np.where(body <= 1.0, 22000 + 9000 * (1 - body), 1200).astype(np.float32)  # soft tissue, air outside
    scan += np.where((body > 0.9) & (body <= 1.0), 9000, 0)  # skin and fat ring
    for sx in (-1, 1):  # lungs: two dark lobes
        lx, ly = cx + sx * rx * 0.45, cy - ry * 0.05
        lobe = ((x - lx) / (rx * 0.32)) ** 2 + ((y - ly) / (ry * 0.62)) ** 2
        scan = np.where(lobe <= 1.0, 5000 + 2000 * lobe, scan)
    spine = ((x - cx) / 22) ** 2 + ((y - (cy + ry * 0.7)) / 20) ** 2
    scan = np.where(spine <= 1.0, 52000, scan)  # bone
    heart = ((x - cx - 20) / (rx * 0.22)) ** 2 + ((y - cy) / (ry * 0.3)) ** 2
    scan = np.where(heart <= 1.0, 30000, scan)
    angle, dist = r.uniform(0, 2 * math.pi), r.uniform(0.2, 0.55)  # the lesion, inside a lung
    lx, ly = cx + math.cos(angle) * rx * dist, cy + math.sin(angle) * ry * dist * 0.6
    lesion = ((x - lx) ** 2 + (y - ly) ** 2) / (r.uniform(9, 18) ** 2)
    scan += np.where(lesion <= 1.0, 16000 * (1 - lesion), 0)
    scan *= rng.gamma(20.0, 1 / 20.0, scan.shape).astype(np.float32)  # speckle
    scan = np.clip(scan, 0, 65535).astype(np.uint16)
    img = Image.fromarray(scan)  # uint16: mode "I;16"
    return _png(img), "image/png", f"scan-{seed:04d}.png"


def _content_moderation(seed: int) -> tuple[bytes, str, str]:
    """An ordinary holiday snapshot: hills, sun, a lake, a person and a banner."""
    rng, r = np.random.default_rng(seed), random.Random(seed)
    w, h = 800, 600
    img = _noisy(_sky_and_ground(w, h, 0.5, rng, ground=(70, 120, 60)), rng, 3.5)
    d = ImageDraw.Draw(img)
    sx, sy = r.randint(80, 720), r.randint(50, 150)
    d.ellipse((sx - 40, sy - 40, sx + 40, sy + 40), fill=(255, 235, 150))
    for k in range(3):  # hills
        base = int(h * (0.5 + 0.04 * k))
        pts = [(0, base)] + [(x, base - int(60 * math.sin(x / (90 + 30 * k) + r.uniform(0, 3)) ** 2)) for x in range(0, w + 40, 40)]
        d.polygon(pts + [(w, h), (0, h)], fill=(60 + 15 * k, 110 + 10 * k, 55))
    d.ellipse((w * 0.1, h * 0.72, w * 0.65, h * 0.95), fill=(60, 110, 170))  # a lake
    px, py = r.randint(520, 700), int(h * 0.62)
    d.ellipse((px - 14, py - 110, px + 14, py - 82), fill=(210, 170, 140))  # a person
    d.rounded_rectangle((px - 22, py - 80, px + 22, py), 6, fill=r.choice([(200, 40, 50), (40, 80, 200), (240, 240, 240)]))
    d.rectangle((px - 18, py, px - 4, py + 60), fill=(50, 50, 70))
    d.rectangle((px + 4, py, px + 18, py + 60), fill=(50, 50, 70))
    d.rectangle((20, h - 60, 360, h - 20), fill=(255, 255, 255))
    d.text((32, h - 48), "Summer by the lake! #holiday", fill=(20, 20, 20))
    img = img.filter(ImageFilter.GaussianBlur(0.5))
    return _jpeg(img), "image/jpeg", f"upload-{seed:04d}.jpg"


def _remote_sensing(seed: int) -> tuple[bytes, str, str]:
    """A drone's nadir view: fields in a grid of roads, a river, roofs of a village."""
    rng, r = np.random.default_rng(seed), random.Random(seed)
    n = 1024
    img = Image.new("RGB", (n, n), (90, 120, 60))
    d = ImageDraw.Draw(img)
    crops = [(110, 150, 60), (180, 170, 90), (140, 110, 70), (80, 130, 70), (200, 190, 120), (95, 140, 50)]
    xs = sorted({0, n, *(r.randint(60, n - 60) for _ in range(5))})
    ys = sorted({0, n, *(r.randint(60, n - 60) for _ in range(5))})
    for x0, x1 in zip(xs, xs[1:], strict=False):
        for y0, y1 in zip(ys, ys[1:], strict=False):
            colour = r.choice(crops)
            d.rectangle((x0, y0, x1, y1), fill=colour)
            for k in range(y0 + 6, y1, 9):  # furrows
                d.line((x0, k, x1, k), fill=tuple(max(0, c - 18) for c in colour), width=2)
    for x in xs[1:-1]:
        d.line((x, 0, x, n), fill=(150, 150, 150), width=14)
    for y in ys[1:-1]:
        d.line((0, y, n, y), fill=(150, 150, 150), width=14)
    river = [(0, r.randint(200, 800))]
    for x in range(64, n + 64, 64):
        river.append((x, min(n, max(0, river[-1][1] + r.randint(-60, 60)))))
    d.line(river, fill=(50, 90, 140), width=26, joint="curve")
    vx, vy = r.randint(200, 800), r.randint(200, 800)
    for _ in range(r.randint(12, 24)):  # roofs
        hx, hy = vx + r.randint(-120, 120), vy + r.randint(-120, 120)
        roof = r.choice([(170, 70, 50), (120, 60, 50), (90, 90, 95)])
        d.rectangle((hx, hy, hx + r.randint(18, 34), hy + r.randint(14, 26)), fill=roof, outline=(60, 40, 30))
    arr = np.asarray(img, dtype=np.float32)
    arr *= (0.92 + 0.16 * rng.random((1, 1, 3))).astype(np.float32)  # white balance of the camera
    out = _noisy(arr, rng, 5.0).filter(ImageFilter.GaussianBlur(0.8))
    return _jpeg(out), "image/jpeg", f"survey-{seed:04d}.jpg"


def _credit_risk(seed: int) -> tuple[bytes, str, str]:
    """Loan applications as JSON lines, schema-valid, drawn around the data set's statistics."""
    r = random.Random(seed)
    lines = []
    for i in range(6 + seed % 10):
        rec: dict = {"application_id": f"LA-{seed:04d}-{i + 1:03d}"}
        for name in records.ATTRIBUTES:
            spec = records._NUMERIC.get(name)
            if spec is not None:
                value = min(spec.high, max(spec.low, r.gauss(spec.mean, spec.std)))
                rec[name] = round(value) if spec.integer else round(value / 50) * 50 or 250
            else:
                cat = records._CATEGORICAL[name]
                code, label, _ = r.choice(cat.values)
                rec[name] = code if r.random() < 0.3 else label  # both spellings are accepted
        lines.append(json.dumps(rec))
    return ("\n".join(lines) + "\n").encode(), "application/x-ndjson", f"applications-{seed:04d}.jsonl"


QUESTIONS = (
    "How do I start a cluster on my laptop?",
    "Where will my function run if its data is on a storage node?",
    "What happens when the accelerator is already busy?",
    "How can I make cold starts shorter?",
    "How do I upload a file so a function can read it?",
    "Which image formats can I send to the image applications?",
    "What happens if the webhook is down?",
    "How long can a function run before it is stopped?",
    "Where are the intermediate results of a chain kept?",
    "Are the accelerator timings measured on real hardware?",
    "How do I pass a secret to my function?",
    "Can an uploaded object start a function by itself?",
)


def _chatbot(seed: int) -> tuple[bytes, str, str]:
    question = QUESTIONS[seed % len(QUESTIONS)]
    return (question + "\n").encode(), "text/plain; charset=utf-8", f"question-{seed:04d}.txt"


def _translation(seed: int) -> tuple[bytes, str, str]:
    """A few consecutive sentences of website copy."""
    r = random.Random(seed)
    start = r.randrange(0, len(corpus.SITE) - 4)
    page = " ".join(corpus.SITE[start : start + r.randint(2, 4)])
    return (page + "\n").encode(), "text/plain; charset=utf-8", f"page-{seed:04d}.txt"


_MAKERS = {
    "credit_risk": _credit_risk,
    "asset_damage": _asset_damage,
    "ppe_detection": _ppe_detection,
    "clinical_analysis": _clinical_analysis,
    "content_moderation": _content_moderation,
    "chatbot": _chatbot,
    "translation": _translation,
    "remote_sensing": _remote_sensing,
}
