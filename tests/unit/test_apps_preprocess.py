"""The applications' pre-processing as units (nearfaas.apps): image decode/resize/normalise,
the trained tokenizers, credit-record features, intermediate tensors and the sample inputs."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image

from nearfaas.apps import APPS, corpus, make_input, records, tensors, text
from nearfaas.apps.build_tokenizers import model_of
from nearfaas.apps.catalog import NORMALISATIONS, ImageRecipe
from nearfaas.apps.errors import StageError
from nearfaas.apps.postprocess import detection, nms
from nearfaas.apps.preprocess import decode_image, letterbox, preprocess_image, resize_crop


def _encode(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


# ---------------------------------------------------------------- images

@pytest.mark.parametrize("norm", sorted(NORMALISATIONS))
def test_a_flat_image_normalises_to_the_expected_values_per_channel(norm):
    rgb = (200, 100, 30)
    data = _encode(Image.new("RGB", (300, 200), rgb), "PNG")
    tensor, info = preprocess_image(data, (1, 3, 224, 224), ImageRecipe("crop", 0.875, norm))
    assert tensor.shape == (1, 3, 224, 224) and tensor.dtype == np.float32 and tensor.flags.c_contiguous
    mean, std = NORMALISATIONS[norm]
    for c in range(3):
        assert np.allclose(tensor[0, c], (rgb[c] / 255 - mean[c]) / std[c], atol=1e-5)
    assert info["original"] == {"width": 300, "height": 200, "format": "PNG"}


def test_crop_keeps_the_centre_and_letterbox_keeps_everything():
    img = Image.new("RGB", (400, 200), (0, 0, 0))
    img.paste((255, 255, 255), (0, 0, 100, 200))  # a white band on the left quarter
    cropped = np.asarray(resize_crop(img, 224, 224, 0.875))
    assert cropped.shape == (224, 224, 3) and cropped.max() == 0  # the centre crop cuts the band off
    boxed, box = letterbox(img, 416, 416)
    arr = np.asarray(boxed)
    assert box == {"scale": 416 / 400, "pad_x": 0, "pad_y": 104}
    assert (arr[:104] == 114).all() and (arr[-104:] == 114).all()  # grey bars above and below
    assert arr[208, :100].min() > 240 and arr[208, 120:].max() == 0


def test_yolo_letterbox_is_unit_scaled_and_maps_back_to_the_original_size():
    data = _encode(Image.new("RGB", (1800, 900), (255, 0, 0)), "JPEG", quality=95)
    tensor, info = preprocess_image(data, (1, 3, 416, 416), APPS["ppe_detection"].image)
    assert tensor.shape == (1, 3, 416, 416) and 0.0 <= tensor.min() and tensor.max() <= 1.0
    assert info["decoded"] == {"width": 450, "height": 225}  # the JPEG decoder skipped detail (1/4 scale)
    assert info["letterbox"]["scale"] == pytest.approx(416 / 1800)  # relative to the upload, not the draft
    assert info["letterbox"]["pad_y"] == 104
    assert tensor[0, 0, 0, 0] == pytest.approx(114 / 255) and tensor[0, 0, 208, 208] > 0.95


def test_exif_orientation_transparency_and_16_bit_scans():
    tall = Image.new("RGB", (320, 240), (10, 200, 10))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° when shown
    img = decode_image(_encode(tall, "JPEG", exif=exif.tobytes()))
    assert img.size == (240, 320) and img.info["original_size"] == (240, 320)

    clear = Image.new("RGBA", (50, 50), (255, 0, 0, 0))  # fully transparent red: white once flattened
    assert np.asarray(decode_image(_encode(clear, "PNG")))[0, 0].tolist() == [255, 255, 255]

    scan = np.linspace(1000, 3000, 64 * 64).reshape(64, 64).astype(np.uint16)  # a dim 16-bit scan
    grey = np.asarray(decode_image(_encode(Image.fromarray(scan), "PNG")))
    assert grey.min() == 0 and grey.max() == 255 and (grey[..., 0] == grey[..., 1]).all()


def test_corrupt_or_foreign_images_raise_stage_errors_with_a_fix():
    good = make_input("asset_damage", 0)[0]
    for data, status in ((b"", 400), (good[:200], 422), (b"BM" + b"\x00" * 60, 415), (b"hello", 415)):
        with pytest.raises(StageError) as info:
            preprocess_image(data, (1, 3, 224, 224))
        assert info.value.status == status and info.value.fix


# ---------------------------------------------------------------- tokenizers

def test_stored_tokenizers_are_what_training_on_the_corpus_gives():
    for kind, train in text.TRAINERS.items():
        stored = text.TOKENIZER_FILES[kind].read_text()
        rebuilt = train().to_str()
        assert model_of(stored) == model_of(rebuilt), f"{kind} is stale: python -m nearfaas.apps tokenizers"
        assert json.loads(stored)["model"]["vocab"] == json.loads(rebuilt)["model"]["vocab"]


def test_corpus_is_a_few_hundred_lines_of_english():
    lines = corpus.training_lines()
    assert len(lines) >= 250 and sum(len(line.split()) for line in lines) > 3000
    assert len(set(lines)) == len(lines)


def test_tokenizers_round_trip_text():
    bpe, wp = text.load_tokenizer("bpe"), text.load_tokenizer("wordpiece")
    samples = [*corpus.SITE[:20], "Crème brûlée costs €4.50 — naïve café? 東京 🙂", "unseen words: kubernetesification"]
    for sentence in samples:
        assert bpe.decode(bpe.encode(sentence).ids) == sentence  # byte-level: exact, nothing unknown
    for sentence in corpus.SITE[:40] + [q for q, _ in corpus.FAQ]:
        ids = wp.encode(sentence, add_special_tokens=False).ids
        assert wp.token_to_id("[UNK]") not in ids
        normalised = wp.normalizer.normalize_str(sentence)
        assert wp.decode(ids).replace(" ", "") == normalised.replace(" ", "")
    assert wp.encode("Hello, world!").tokens[0] == "[CLS]" and wp.encode("Hello, world!").tokens[-1] == "[SEP]"


def test_question_encoding_is_128_tokens_with_a_mask_and_the_best_passage():
    arrays, meta = text.encode_question("How do I pass a secret to a function?")
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        assert arrays[name].shape == (1, text.SEQ_LEN) and arrays[name].dtype == np.int64
    n = meta["tokens"]
    assert arrays["attention_mask"].sum() == n and arrays["attention_mask"][0, :n].all()
    wp = text.load_tokenizer("wordpiece")
    ids = arrays["input_ids"][0]
    assert ids[0] == wp.token_to_id("[CLS]") and ids[n - 1] == wp.token_to_id("[SEP]") and (ids[n:] == wp.token_to_id("[PAD]")).all()
    assert "secret" in meta["context"] and arrays["token_type_ids"][0, meta["context_start"]] == 1

    long_context = " ".join(corpus.PROSE)
    arrays, meta = text.encode_question("Why is data heavy?", long_context)
    assert arrays["attention_mask"].sum() == text.SEQ_LEN and meta["truncated_context_tokens"] > 0


def test_answer_span_cuts_the_best_span_from_the_passage():
    arrays, meta = text.encode_question("What is nearfaas?", "nearfaas is a serverless platform near the data.")
    start, end = np.full(128, -5.0), np.full(128, -5.0)
    first = meta["context_start"]
    start[first + 3], end[first + 4] = 4.0, 4.0  # tokens 3..4 of the passage: "serverless platform"
    start[0] = end[0] = 99.0  # [CLS] is not part of the passage
    span = text.answer_span(start, end, meta)
    assert span["answer"] == "serverless platform" and span["start_token"] == first + 3


def test_ids_beyond_a_small_vocabulary_are_mapped_modulo():
    arrays, meta = text.encode_document("Welcome to our online store.", vocab_size=100)
    assert arrays["input_ids"].max() < 100 and meta["remapped_ids"] > 0
    raw, _ = text.encode_document("Welcome to our online store.")
    assert (arrays["input_ids"] == raw["input_ids"] % 100).all()
    ids, count = text.fit_vocab(np.array([[1, 250, 99]]), 100)
    assert ids.tolist() == [[1, 50, 99]] and count == 1


def test_document_encoding_pads_with_end_of_text_and_keeps_the_prompt_end():
    bpe = text.load_tokenizer("bpe")
    arrays, meta = text.encode_document("Free shipping on all orders over fifty euros.", "German")
    n = meta["tokens"]
    assert (arrays["input_ids"][0, n:] == bpe.token_to_id("<|endoftext|>")).all()
    assert bpe.decode(arrays["input_ids"][0, :n].tolist()).endswith("German:")
    arrays, meta = text.encode_document(" ".join(corpus.SITE[:30]))
    assert meta["truncated_tokens"] > 0 and bpe.decode(arrays["input_ids"][0].tolist()).endswith("French:")


# ---------------------------------------------------------------- credit records

def _mean_record(**over) -> dict:
    rec = {spec.name: spec.mean for spec in records.NUMERIC}
    rec.update({spec.name: spec.values[0][1] for spec in records.CATEGORICAL})
    rec.update(over)
    return rec


def test_credit_features_are_200_standardised_float32():
    assert records.FEATURES == 200 and len(records.ATTRIBUTES) == 20 and len(records.feature_names()) == 200
    feats = records.featurize([_mean_record(), _mean_record(age=35.546 + 2 * 11.3755)])
    assert feats.shape == (2, 200) and feats.dtype == np.float32
    assert np.allclose(feats[0, :7], 0.0, atol=1e-6)  # the data set's mean is 0 after standardising
    assert feats[1, 4] == pytest.approx(2.0)  # age two standard deviations above the mean
    assert (feats[:, 7:63].sum(axis=1) == 13).all()  # one code per categorical attribute
    crosses = feats[:, 63:] * np.sqrt(78)  # 78 signed crosses, each ±1/sqrt(78), some sharing a bucket
    assert np.allclose(crosses, np.round(crosses), atol=1e-5) and np.abs(crosses).sum(axis=1).max() <= 78
    assert np.abs(np.round(crosses)).sum(axis=1).min() > 40

    data = make_input("credit_risk", 5)[0]
    feats, info = records.records_to_features(data)
    assert feats.shape == (info["records"], 200) and np.isfinite(feats).all()
    assert np.abs(feats[:, :7]).max() < 6  # standardised, not raw (amounts are in the thousands)


def test_codes_names_csv_and_german_data_give_the_same_features():
    lines = [json.loads(line) for line in make_input("credit_risk", 2)[0].decode().splitlines()]
    as_codes = []
    for rec in lines:
        coded = dict(rec)
        for spec in records.CATEGORICAL:
            coded[spec.name] = spec.values[spec.index(rec[spec.name])][0]
        as_codes.append(coded)
    base = records.featurize(lines)
    assert np.array_equal(records.featurize(as_codes), base)
    csv_text = ",".join(records.ATTRIBUTES) + ",extra\n" + "\n".join(
        ",".join(str(r[a]) for a in records.ATTRIBUTES) + ",x" for r in lines)
    assert np.array_equal(records.records_to_features(csv_text.encode())[0], base)
    german = "\n".join(" ".join(str(r[a]) for a in records.ATTRIBUTES) + " 1" for r in as_codes)
    assert np.array_equal(records.records_to_features(german.encode())[0], base)
    assert np.array_equal(records.records_to_features(json.dumps(lines).encode())[0], base)


@pytest.mark.parametrize("change,words", [
    ({"purpose": "yacht"}, "purpose='yacht' is not a known value"),
    ({"age": 7}, "age=7 is outside"),
    ({"duration": "soon"}, "must be a number"),
    ({"savings": None}, "lacks savings"),
])
def test_invalid_records_name_the_record_and_attribute(change, words):
    good = _mean_record()
    with pytest.raises(StageError) as info:
        records.featurize([good, {**good, **change}])
    assert info.value.status == 422 and words in info.value.error and "record 2" in info.value.error


# ---------------------------------------------------------------- tensors and detection

def test_npy_intermediates_are_read_without_a_copy_and_npz_carries_metadata():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    buf = bytearray(tensors.npy_bytes(a))
    arrays, meta = tensors.load(memoryview(buf))
    assert meta == {} and np.array_equal(arrays[""], a)
    buf[-4:] = np.float32(-1).tobytes()  # a view of the buffer (the mmap, in a worker)
    assert arrays[""][1, 2, 3] == -1
    both, meta = tensors.load(tensors.npz_bytes({"x": a, "y": a[0]}, {"k": [1, 2]}))
    assert set(both) == {"x", "y"} and meta == {"k": [1, 2]}
    fortran = tensors.load(tensors.npy_bytes(np.asfortranarray(a)))[0][""]
    assert np.array_equal(fortran, a)


def test_yolo_decoding_finds_a_planted_box_and_nms_drops_duplicates():
    head = np.full((1, 255, 52, 52), -12.0, np.float32)
    anchor, cls, gy, gx = 1, 0, 20, 30  # a person at cell (20, 30), second anchor (16 × 30 px)
    base = anchor * 85
    head[0, base + 0 : base + 4, gy, gx] = 0.0  # centre of the cell, the anchor's size
    head[0, base + 4, gy, gx] = 8.0
    head[0, base + 5 + cls, gy, gx] = 8.0
    out = detection({"detections_52": head}, APPS["ppe_detection"], 416)
    assert out["detections"] == 1 and out["people"] == 1
    x0, y0, x1, y1 = out["top"][0]["box"]
    assert (x0 + x1) / 2 == pytest.approx(30.5 * 8, abs=0.1) and (y1 - y0) == pytest.approx(30, abs=0.1)
    boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [50, 50, 60, 60]], np.float32)
    keep = nms(boxes, np.array([0.9, 0.8, 0.7]), np.array([0, 0, 0]))
    assert keep.tolist() == [0, 2]


# ---------------------------------------------------------------- sample inputs

@pytest.mark.parametrize("key", list(APPS))
def test_sample_inputs_are_deterministic_by_seed_and_of_the_catalog_type(key):
    data, content_type, name = make_input(key, 7)
    assert make_input(key, 7) == (data, content_type, name)
    assert make_input(key, 8)[0] != data
    assert content_type == APPS[key].content_type and name.startswith(APPS[key].slug + "/")
    if APPS[key].input_kind == "image":
        img = decode_image(data)
        assert min(img.size) >= 256 and np.asarray(img).std() > 10  # a scene, not a flat fill
    elif APPS[key].input_kind == "text":
        assert data.decode().strip()
    else:
        assert records.records_to_features(data)[0].shape[1] == 200
