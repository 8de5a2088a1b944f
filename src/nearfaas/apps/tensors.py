"""Tensors between stages: NumPy's .npy (one array) and .npz (several) formats, never pickles.

A ``.npy`` intermediate is read without a copy: when the stage got its input as a memory map
(the object is on this node), ``load`` returns an array that views the mapped file. ``.npz``
holds several arrays (model inputs, plus metadata under names starting with ``_``).
"""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np

from .errors import UNPROCESSABLE, StageError

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"
META_PREFIX = "_"  # .npz members that are not model inputs or outputs (tokens, summary, ...)


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def npz_bytes(arrays: dict[str, np.ndarray], meta: dict | None = None) -> bytes:
    """Several arrays in one .npz (stored, not compressed: tensors of floats barely compress and
    the next stage should not pay for inflating them); ``meta`` travels as JSON under ``_meta``."""
    members = {name: np.ascontiguousarray(a) for name, a in arrays.items()}
    if meta is not None:
        members[META_PREFIX + "meta"] = np.array(json.dumps(meta, sort_keys=True))
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **members)
    return buf.getvalue()


def load(data) -> tuple[dict[str, np.ndarray], dict]:
    """Arrays and metadata from .npy or .npz bytes (or a memoryview over them).

    A .npy gives ``{"": array}``. Raises StageError (422) on anything else, so a stage fed the
    wrong object answers with what it got instead of crashing.
    """
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    head = bytes(view[:8])
    if not head:
        raise StageError(UNPROCESSABLE, "the intermediate tensor object is empty",
                         "run the previous stage of the chain first; it writes the tensor to its output")
    if head.startswith(NPY_MAGIC):
        return {"": _load_npy(view)}, {}
    if head.startswith(ZIP_MAGIC):
        return _load_npz(view)
    raise StageError(UNPROCESSABLE, f"the intermediate is not a NumPy .npy/.npz tensor (starts with {head!r})",
                     "send the output of this application's pre-processing stage, not the raw upload")


def _load_npy(view) -> np.ndarray:
    try:
        header = io.BytesIO(bytes(view[:4096]))
        version = np.lib.format.read_magic(header)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(header)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(header)
        offset = header.tell()
    except (ValueError, OSError, EOFError) as exc:
        raise StageError(UNPROCESSABLE, f"the .npy tensor has a bad header: {exc}",
                         "write the tensor with numpy.save(..., allow_pickle=False)") from None
    if dtype.hasobject:
        raise StageError(UNPROCESSABLE, "the .npy tensor holds Python objects (a pickle), which are never loaded",
                         "write a numeric array")
    count = int(np.prod(shape, dtype=np.int64))
    if len(view) - offset < count * dtype.itemsize:
        raise StageError(UNPROCESSABLE, f"the .npy tensor is truncated: its header says {tuple(shape)} {dtype} "
                                        f"({count * dtype.itemsize} bytes) but {len(view) - offset} bytes follow",
                         "upload the whole tensor")
    array = np.frombuffer(view, dtype=dtype, count=count, offset=offset)  # a view: no copy of the data
    return array.reshape(shape[::-1]).T if fortran else array.reshape(shape)


def _load_npz(view) -> tuple[dict[str, np.ndarray], dict]:
    try:
        with np.load(io.BytesIO(bytes(view)), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise StageError(UNPROCESSABLE, f"the .npz tensor archive cannot be read: {exc}",
                         "write it with numpy.savez(..., allow_pickle=False)") from None
    meta: dict = {}
    raw = arrays.pop(META_PREFIX + "meta", None)
    if raw is not None:
        try:
            meta = json.loads(str(raw))
        except ValueError:
            meta = {}
    return arrays, meta if isinstance(meta, dict) else {}
