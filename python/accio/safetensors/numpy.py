"""Drop-in for safetensors.numpy: load_file and save_file with NumPy arrays, read and written through
accio. BF16 and the F8 types load as ml_dtypes arrays, which safetensors.numpy cannot load
(docs/safetensors.md)."""
from __future__ import annotations

from . import load_file as _load_file, save_file as _save_file, safe_open as _safe_open

__all__ = ["load_file", "save_file", "safe_open"]


def load_file(filename, *, copy: bool = False, **settings) -> dict:
    """As safetensors.numpy.load_file(filename): a dict of numpy.ndarray. filename may also be a
    model.safetensors.index.json or a list of shards (read in parallel)."""
    return _load_file(filename, "cpu", "numpy", copy=copy, **settings)


def save_file(tensor_dict: dict, filename, metadata: dict | None = None, *, fsync: bool = False, **settings) -> None:
    """As safetensors.numpy.save_file: the same bytes."""
    _save_file(tensor_dict, filename, metadata, fsync=fsync, **settings)


def safe_open(filename, **settings):
    """As safetensors.safe_open(filename, framework="np")."""
    return _safe_open(filename, "numpy", "cpu", **settings)
