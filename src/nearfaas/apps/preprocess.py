"""Image pre-processing (f1 of the five image applications): bytes of a JPEG or PNG in, a
float32 NCHW tensor of the model's input shape out.

Steps, as the reference pipelines of the models do them:

1. decode with Pillow (JPEG and PNG only; anything else is a 415), apply the EXIF orientation,
   flatten transparency onto white, scale 16-bit grey scans to 8 bits, convert to RGB;
2. resize and crop (one resampling pass, using Pillow's ``box``):
   ``crop``      shorter side to size / crop_ratio, then the centre size × size (ImageNet eval:
                 256 → 224 for ratio 0.875);
   ``letterbox`` scale the longer side to the size, pad with grey 114 (YOLO);
3. normalise: ``imagenet`` (mean 0.485/0.456/0.406, std 0.229/0.224/0.225 on [0, 1]),
   ``unit`` ([0, 1], what YOLOv3 is trained on) or ``half`` (mean = std = 0.5, ViT);
4. HWC → CHW, add the batch axis: ``(1, 3, H, W)`` float32, C-contiguous.

``tensors.npy_bytes`` serialises the result for the next stage.
"""

from __future__ import annotations

import io
import math
import warnings
import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .catalog import NORMALISATIONS, ImageRecipe
from .errors import BAD_REQUEST, UNPROCESSABLE, UNSUPPORTED, StageError

ACCEPTED_FORMATS = ("JPEG", "PNG")
MAX_PIXELS = 64_000_000  # larger uploads are refused before decoding (a decompression bomb guard)
LETTERBOX_FILL = (114, 114, 114)


def decode_image(data, draft_size: tuple[int, int] | None = None, draft_fit: str = "cover") -> Image.Image:
    """An RGB image from JPEG/PNG bytes; StageError 400/415/422 for empty, other or corrupt data.

    ``draft_size`` lets the JPEG decoder skip detail it would throw away (DCT scaling by 1/2,
    1/4 or 1/8): with ``draft_fit="cover"`` the decoded image still covers that size in both
    directions (for a centre crop), with ``"contain"`` it still holds the image scaled to fit
    inside it (for a letterbox). ``img.info["original_size"]`` and ``img.info["draft_factor"]``
    (original pixels per decoded pixel) say what was skipped.
    """
    if data is None or len(data) == 0:
        raise StageError(BAD_REQUEST, "the input object is empty (0 bytes)", "upload a JPEG or PNG image")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data), formats=ACCEPTED_FORMATS)
    except UnidentifiedImageError:
        kind = _sniff(bytes(data[:16]))
        if kind in ACCEPTED_FORMATS:  # the right signature, but Pillow cannot parse the header
            raise StageError(UNPROCESSABLE, f"the {kind} image is corrupt: its header cannot be read",
                             "upload the image again; the file may be truncated or damaged") from None
        raise StageError(UNSUPPORTED, f"the input is not a JPEG or PNG image ({kind or 'unknown format'})",
                         "convert it to JPEG or PNG", accepted=["image/jpeg", "image/png"]) from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise StageError(UNPROCESSABLE, f"the image is too large to decode safely: {exc}",
                         f"resize it below {MAX_PIXELS // 1_000_000} megapixels") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise StageError(UNPROCESSABLE, f"the image cannot be opened: {exc}", "upload a valid JPEG or PNG") from None
    fmt = img.format
    width, height = img.size
    if width < 1 or height < 1 or width * height > MAX_PIXELS:
        raise StageError(UNPROCESSABLE, f"the image is {width}×{height} pixels; accepted: 1 to {MAX_PIXELS:,} pixels",
                         f"resize it below {MAX_PIXELS // 1_000_000} megapixels")
    try:
        if draft_size and fmt == "JPEG":
            if draft_fit == "contain":
                fit = min(draft_size[0] / width, draft_size[1] / height)
                draft_size = (math.ceil(width * fit), math.ceil(height * fit))
            img.draft("RGB", draft_size)
        img.load()  # decodes now: a truncated or damaged file fails here, not later
        factor = width / img.size[0]
        decoded = img.size
        img = ImageOps.exif_transpose(img)
        if img.size != decoded:  # rotated by its EXIF orientation
            width, height = height, width
        img = _to_rgb(img)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise StageError(UNPROCESSABLE, f"the {fmt} image is corrupt and cannot be decoded: {exc}",
                         "upload the image again; the file may be truncated or damaged") from None
    img.info["original_size"] = (width, height)
    img.info["draft_factor"] = factor
    img.info["format"] = fmt
    return img


def _sniff(head: bytes) -> str | None:
    for magic, name in ((b"\xff\xd8\xff", "JPEG"), (b"\x89PNG\r\n\x1a\n", "PNG"), (b"GIF8", "GIF"), (b"BM", "BMP"),
                        (b"RIFF", "RIFF/WebP"), (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"), (b"%PDF", "PDF")):
        if head.startswith(magic):
            return name
    return None


def _to_rgb(img: Image.Image) -> Image.Image:
    if img.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):  # 16-bit or float grey scans: stretch to 8 bits
        arr = np.asarray(img, dtype=np.float32)
        lo, hi = float(arr.min()), float(arr.max())
        scaled = (arr - lo) * (255.0 / (hi - lo)) if hi > lo else np.zeros_like(arr)
        img = Image.fromarray(scaled.round().astype(np.uint8), mode="L")
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        img = Image.alpha_composite(background, rgba)
    return img.convert("RGB") if img.mode != "RGB" else img


def resize_crop(img: Image.Image, height: int, width: int, crop_ratio: float = 0.875) -> Image.Image:
    """Resize the shorter side to (size / crop_ratio) and cut the centre height × width, in one
    resampling pass over the source region that the crop keeps."""
    w, h = img.size
    scale = max(height, width) / crop_ratio / min(w, h)
    crop_w, crop_h = min(w, width / scale), min(h, height / scale)
    left, top = (w - crop_w) / 2.0, (h - crop_h) / 2.0
    return img.resize((width, height), Image.Resampling.BILINEAR, box=(left, top, left + crop_w, top + crop_h),
                      reducing_gap=3.0)


def letterbox(img: Image.Image, height: int, width: int, fill=LETTERBOX_FILL) -> tuple[Image.Image, dict]:
    """Fit the whole image inside height × width keeping its aspect ratio, centred on grey;
    also returns how to map boxes back (``x_orig = (x - pad_x) / scale``)."""
    w, h = img.size
    scale = min(width / w, height / h)
    new_w, new_h = max(1, round(w * scale)), max(1, round(h * scale))
    resized = img.resize((new_w, new_h), Image.Resampling.BILINEAR, reducing_gap=3.0)
    canvas = Image.new("RGB", (width, height), fill)
    pad_x, pad_y = (width - new_w) // 2, (height - new_h) // 2
    canvas.paste(resized, (pad_x, pad_y))
    return canvas, {"scale": scale, "pad_x": pad_x, "pad_y": pad_y}


def to_tensor(img: Image.Image, normalise: str = "imagenet") -> np.ndarray:
    """(1, 3, H, W) float32 from an RGB image: [0, 1], minus mean, over std, channels first."""
    mean, std = NORMALISATIONS[normalise]
    arr = np.asarray(img, dtype=np.float32) * np.float32(1.0 / 255.0)
    arr = (arr - np.asarray(mean, dtype=np.float32)) / np.asarray(std, dtype=np.float32)
    return np.ascontiguousarray(arr.transpose(2, 0, 1)[None], dtype=np.float32)


def image_shape(shape) -> tuple[int, int, int, int]:
    """(N, 3, H, W) from a model input shape given as (N, 3, H, W) or (3, H, W)."""
    dims = tuple(int(d) for d in shape)
    if len(dims) == 3:
        dims = (1, *dims)
    if len(dims) != 4 or dims[1] != 3 or dims[2] < 1 or dims[3] < 1:
        raise ValueError(f"an image model input must be (N, 3, H, W) or (3, H, W), got {tuple(shape)}")
    return dims  # type: ignore[return-value]


def preprocess_image(data, shape, recipe: ImageRecipe = ImageRecipe()) -> tuple[np.ndarray, dict]:
    """The model-ready tensor for one image, and facts about it for the stage's answer."""
    n, _, height, width = image_shape(shape)
    if recipe.method == "crop":
        need = round(max(height, width) / recipe.crop_ratio)
        img = decode_image(data, draft_size=(need, need), draft_fit="cover")
    else:
        img = decode_image(data, draft_size=(width, height), draft_fit="contain")
    (ow, oh), factor = img.info["original_size"], img.info["draft_factor"]
    info: dict = {"original": {"width": ow, "height": oh, "format": img.info["format"]},
                  "decoded": {"width": img.width, "height": img.height}, "method": recipe.method, "normalise": recipe.normalise}
    if recipe.method == "letterbox":
        img, box = letterbox(img, height, width)
        box["scale"] /= factor  # model pixels per pixel of the original upload
        info["letterbox"] = box
    else:
        img = resize_crop(img, height, width, recipe.crop_ratio)
    tensor = to_tensor(img, recipe.normalise)
    if n > 1:  # a model with a fixed batch larger than one: the image fills every slot
        tensor = np.ascontiguousarray(np.repeat(tensor, n, axis=0))
    return tensor, info
