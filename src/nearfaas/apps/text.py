"""Text pre-processing (f1 of the chatbot and translation applications): real tokenizers.

Two tokenizers from the Hugging Face ``tokenizers`` package, trained offline on the English
corpus in ``corpus.py`` and stored as JSON in ``data/`` (``python -m
nearfaas.apps tokenizers`` rebuilds them; training is deterministic):

* ``wordpiece`` — BERT-style: BERT normaliser (lower case, accents stripped), BERT
  pre-tokenizer, WordPiece with ``##`` continuations, ``[CLS] question [SEP] passage [SEP]``;
* ``bpe`` — GPT-2-style byte-level BPE: every byte sequence has a tokenisation, no unknowns.

Every encoding is exactly ``SEQ_LEN`` (128) tokens: truncated, then padded, with an attention
mask of ones over the real tokens.

**Vocabulary sizes.** A model's embedding table may be smaller than the tokenizer's vocabulary
(the tiny test models) or larger (the full ones, sized like BERT's 30 522 and GPT-2's 50 257).
Ids the model has no row for are mapped ``id % vocab_size`` (``fit_vocab``): the tensor stays
valid for the model and the mapping is deterministic. Special tokens have the smallest ids,
so they are never remapped. The pre-processing answer reports how many ids were remapped.
"""

from __future__ import annotations

import functools
import json
import re
import string
import unicodedata
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from . import corpus
from .errors import BAD_REQUEST, UNPROCESSABLE, UNSUPPORTED, StageError

SEQ_LEN = 128
DATA_DIR = Path(__file__).with_name("data")
TOKENIZER_FILES = {"wordpiece": DATA_DIR / "wordpiece.json", "bpe": DATA_DIR / "bpe.json"}
TRAIN_VOCAB = 4096  # the most the BPE trainer may produce; the corpus yields fewer
WORDPIECE_MERGE_VOCAB = 2048  # BPE units behind the WordPiece vocabulary (each enters it twice)
# Characters every WordPiece vocabulary knows, seen in the corpus or not (after BERT
# normalisation: lower case, accents stripped), so common punctuation never becomes [UNK].
WORDPIECE_ALPHABET = string.ascii_lowercase + string.digits + string.punctuation + "—–‘’“”…•€£¥°×ßæøœðþ"
WORDPIECE_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BPE_SPECIALS = ["<|endoftext|>"]
MAX_TEXT_BYTES = 1 << 20  # a question or a page to translate; larger texts are refused
MAX_ANSWER_TOKENS = 30


# ---------------------------------------------------------------- training

def train_wordpiece(lines: list[str] | None = None, vocab_size: int = WORDPIECE_MERGE_VOCAB) -> Tokenizer:
    """A BERT-style WordPiece tokenizer trained on ``lines`` (the corpus by default).

    The subword units are learnt by BPE merges over the BERT-normalised, BERT-pre-tokenized
    words (what ``tokenizers``' own WordPieceTrainer does too, but that one numbers its ``##``
    units in hash-map order, so two runs give different ids). Every unit then enters the
    vocabulary twice, as a word start ``unit`` and as a continuation ``##unit``, in merge order:
    the same corpus always gives the same vocabulary and ids.
    """
    normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)
    units = Tokenizer(models.BPE(unk_token="[UNK]"))
    units.normalizer = normalizer
    units.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=WORDPIECE_SPECIALS,
                                  initial_alphabet=list(WORDPIECE_ALPHABET), show_progress=False)
    units.train_from_iterator(lines if lines is not None else corpus.training_lines(), trainer=trainer)
    learnt = sorted(units.get_vocab().items(), key=lambda item: item[1])
    vocab: dict[str, int] = {}
    for token in WORDPIECE_SPECIALS:
        vocab[token] = len(vocab)
    for token, _ in learnt:
        if token in vocab:
            continue
        vocab[token] = len(vocab)
        vocab["##" + token] = len(vocab)
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return tok


def train_bpe(lines: list[str] | None = None, vocab_size: int = TRAIN_VOCAB) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=BPE_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(lines if lines is not None else corpus.training_lines(), trainer=trainer)
    return tok


TRAINERS = {"wordpiece": train_wordpiece, "bpe": train_bpe}


@functools.cache
def load_tokenizer(kind: str) -> Tokenizer:
    """The stored tokenizer (``wordpiece`` or ``bpe``), with no padding or truncation set: the
    encoders below do both themselves, so a shared instance is never mutated per call."""
    path = TOKENIZER_FILES[kind]
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; build it with python -m nearfaas.apps tokenizers")
    tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    tok.no_truncation()
    return tok


# ---------------------------------------------------------------- input text

def decode_text(data, what: str = "text") -> str:
    """UTF-8 text of an uploaded object, stripped; StageError for empty, binary or huge input."""
    if data is None or len(data) == 0:
        raise StageError(BAD_REQUEST, f"the input object is empty (0 bytes); expected UTF-8 {what}",
                         f"upload the {what} as a UTF-8 text file")
    if len(data) > MAX_TEXT_BYTES:
        raise StageError(UNPROCESSABLE, f"the {what} is {len(data)} bytes; at most {MAX_TEXT_BYTES} are accepted",
                         "split it into smaller documents")
    raw = bytes(data)
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StageError(UNSUPPORTED, f"the input is not UTF-8 text (byte {exc.start} is {raw[exc.start]:#04x})",
                         f"save the {what} as UTF-8", accepted=["text/plain; charset=utf-8", "application/json"]) from None
    if "\x00" in text:
        raise StageError(UNSUPPORTED, "the input holds NUL bytes: it is binary data, not text",
                         f"upload the {what} as a UTF-8 text file", accepted=["text/plain; charset=utf-8", "application/json"])
    return clean_text(text)


def clean_text(text: str) -> str:
    """NFC-normalised text without control or format characters (zero-width spaces, BOMs,
    direction marks), whitespace runs kept as they are, stripped at both ends."""
    text = unicodedata.normalize("NFC", text)
    return "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cf")).strip()


def parse_request_text(text: str, fields: tuple[str, ...]) -> dict[str, str]:
    """A text object is either plain text (the first field) or a JSON object with the fields."""
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise StageError(UNPROCESSABLE, f"the input starts with '{{' but is not valid JSON: {exc}",
                             f"send plain text, or a JSON object with {', '.join(repr(f) for f in fields)}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get(fields[0]), str):
            raise StageError(UNPROCESSABLE, f"the JSON input needs a string field {fields[0]!r}",
                             f'send e.g. {{"{fields[0]}": "..."}}')
        return {f: clean_text(obj[f]) for f in fields if isinstance(obj.get(f), str)}
    return {fields[0]: text}


def fit_vocab(ids: np.ndarray, vocab_size: int | None) -> tuple[np.ndarray, int]:
    """Ids that fit an embedding of ``vocab_size`` rows (``id % vocab_size`` for the others),
    and how many were remapped."""
    ids = np.asarray(ids, dtype=np.int64)
    if not vocab_size or vocab_size <= 0:
        return ids, 0
    over = ids >= vocab_size
    return np.where(over, ids % vocab_size, ids), int(over.sum())


def _pad(ids: list[int], pad_id: int, length: int = SEQ_LEN) -> tuple[np.ndarray, np.ndarray]:
    n = min(len(ids), length)
    out = np.full((1, length), pad_id, dtype=np.int64)
    out[0, :n] = ids[:n]
    mask = np.zeros((1, length), dtype=np.int64)
    mask[0, :n] = 1
    return out, mask


# ---------------------------------------------------------------- chatbot (BERT, question answering)

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the is are was were be been do does did i you it its of to in on for and or with my me "
                  "how what why when where which who can could should would will this that there their there "
                  "as at by from if into not no so than then they we your our has have had".split())


def _words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


@functools.cache
def _passage_index() -> tuple[list[str], list[set[str]], dict[str, float]]:
    docs = corpus.passages()
    sets = [set(_words(d)) for d in docs]
    df: dict[str, int] = {}
    for s in sets:
        for w in s:
            df[w] = df.get(w, 0) + 1
    idf = {w: float(np.log((1 + len(docs)) / (1 + n))) + 1.0 for w, n in df.items()}
    return docs, sets, idf


def best_passage(question: str) -> tuple[str, int, float]:
    """The FAQ passage that best matches the question (idf-weighted word overlap): the context
    a question-answering model reads when the caller gives none. Returns (passage, index, score)."""
    docs, sets, idf = _passage_index()
    words = set(_words(question))
    scores = [sum(idf.get(w, 0.0) for w in words & s) for s in sets]
    best = int(np.argmax(scores))
    return docs[best], best, float(scores[best])


def encode_question(question: str, context: str | None = None, vocab_size: int | None = None) -> tuple[dict, dict]:
    """BERT inputs for extractive question answering over ``context`` (or the best FAQ passage).

    Returns (arrays, meta): arrays are ``input_ids``, ``attention_mask`` and ``token_type_ids``,
    each int64 [1, 128]; meta has what f2 needs to turn a span into text (the passage and each
    token's character offsets in it) plus counts for the answer.
    """
    if not question:
        raise StageError(UNPROCESSABLE, "the question is empty", "send a question as UTF-8 text")
    retrieved = None
    if not context:
        context, index, score = best_passage(question)
        retrieved = {"passage": index, "score": round(score, 3)}
    tok = load_tokenizer("wordpiece")
    q_ids = tok.encode(question, add_special_tokens=False).ids
    if not q_ids:
        raise StageError(UNPROCESSABLE, "the question tokenizes to nothing (no letters, digits or punctuation)",
                         "send a question in words")
    q_ids = q_ids[: SEQ_LEN // 2]  # a very long question keeps its first 64 tokens; the passage gets the rest
    c_enc = tok.encode(context, add_special_tokens=False)
    room = SEQ_LEN - len(q_ids) - 3
    c_ids, c_offsets = c_enc.ids[:room], c_enc.offsets[:room]
    cls, sep, pad = (tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]"))
    ids = [cls, *q_ids, sep, *c_ids, sep]
    types = [0] * (len(q_ids) + 2) + [1] * (len(c_ids) + 1)
    input_ids, mask = _pad(ids, pad)
    token_types, _ = _pad(types, 0)
    fitted, remapped = fit_vocab(input_ids, vocab_size)
    context_start = len(q_ids) + 2
    meta = {"context": context, "context_start": context_start, "context_offsets": [list(o) for o in c_offsets],
            "tokens": len(ids), "question_tokens": len(q_ids), "context_tokens": len(c_ids),
            "truncated_context_tokens": len(c_enc.ids) - len(c_ids), "remapped_ids": remapped, "tokenizer": "wordpiece"}
    if retrieved:
        meta["retrieved"] = retrieved
    return {"input_ids": fitted, "attention_mask": mask, "token_type_ids": token_types}, meta


def answer_span(start_logits, end_logits, meta: dict, max_tokens: int = MAX_ANSWER_TOKENS) -> dict:
    """The best passage span (start ≤ end < start + max_tokens, inside the passage) by
    start + end logit, and its text cut from the passage by character offsets."""
    start = np.asarray(start_logits, dtype=np.float64).reshape(-1)
    end = np.asarray(end_logits, dtype=np.float64).reshape(-1)
    first = int(meta.get("context_start", 0))
    offsets = meta.get("context_offsets") or []
    last = min(first + len(offsets), start.size, end.size) - 1
    if last < first:
        return {"answer": "", "start_token": None, "end_token": None, "score": None}
    s, e = start[first : last + 1], end[first : last + 1]
    scores = s[:, None] + e[None, :]
    n = scores.shape[0]
    i, j = np.indices((n, n))
    scores[(j < i) | (j - i >= max_tokens)] = -np.inf
    best = int(np.argmax(scores))
    bi, bj = divmod(best, n)
    context = meta.get("context", "")
    text = context[offsets[bi][0] : offsets[bj][1]] if offsets else ""
    return {"answer": text, "start_token": first + bi, "end_token": first + bj, "score": round(float(scores[bi, bj]), 4)}


# ---------------------------------------------------------------- translation (GPT-2)

def translation_prompt(text: str, target: str) -> str:
    return f"Translate English to {target}.\nEnglish: {text}\n{target}:"


def encode_document(text: str, target: str = "French", vocab_size: int | None = None) -> tuple[dict, dict]:
    """GPT-2 inputs for a text to translate: the prompt, byte-level BPE, right padded with
    ``<|endoftext|>``; ``input_ids`` and ``attention_mask`` int64 [1, 128]."""
    if not text:
        raise StageError(UNPROCESSABLE, "the text to translate is empty", "send the text as UTF-8")
    tok = load_tokenizer("bpe")
    text_ids = tok.encode(text, add_special_tokens=False).ids
    if not text_ids:
        raise StageError(UNPROCESSABLE, "the text tokenizes to nothing", "send text in words")
    ids = tok.encode(translation_prompt(text, target), add_special_tokens=False).ids
    eot = tok.token_to_id("<|endoftext|>")
    truncated = max(0, len(ids) - SEQ_LEN)
    if truncated:  # keep the end of the prompt (the "French:" cue the model continues from)
        ids = ids[-SEQ_LEN:]
    input_ids, mask = _pad(ids, eot)
    fitted, remapped = fit_vocab(input_ids, vocab_size)
    meta = {"tokens": len(ids), "text_tokens": len(text_ids), "truncated_tokens": truncated, "remapped_ids": remapped,
            "target_language": target, "tokenizer": "bpe"}
    return {"input_ids": fitted, "attention_mask": mask}, meta


def token_preview(next_ids, meta: dict, limit: int = 16) -> dict:
    """What GPT-2's per-position next-token ids say: the token predicted after the prompt
    (decoded when it is in the tokenizer's vocabulary) and the first ids over real tokens."""
    ids = np.asarray(next_ids).reshape(-1)
    n = max(1, min(int(meta.get("tokens", ids.size)), ids.size))
    tok = load_tokenizer("bpe")
    nxt = int(ids[n - 1])
    text = tok.decode([nxt]) if nxt < tok.get_vocab_size() else None
    return {"next_token_id": nxt, "next_token": text, "preview_ids": [int(i) for i in ids[: min(n, limit)]],
            "positions": n}
