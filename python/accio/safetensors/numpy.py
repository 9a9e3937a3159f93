"""Drop-in for safetensors.numpy: load_file, save_file, safe_open, load and save with NumPy arrays,
read and written through accio. BF16 and the F8 types load as ml_dtypes arrays, which
safetensors.numpy cannot load (docs/safetensors.md)."""
from __future__ import annotations

from . import load_file as _load_file, save_file as _save_file, safe_open as _safe_open, load as _load, save as _save

__all__ = ["load_file", "save_file", "safe_open", "load", "save"]


def load_file(filename, *, copy: bool = False, backend: str | None = None, **settings) -> dict:
    """As safetensors.numpy.load_file(filename): a dict of numpy.ndarray. filename may also be a
    model.safetensors.index.json or a list of shards (read in parallel). backend, which picks
    safetensors' own way of reading, is accepted and has no effect: accio reads the file."""
    return _load_file(filename, "cpu", "numpy", copy=copy, **settings)


def save_file(tensor_dict: dict, filename, metadata: dict | None = None, *, fsync: bool = False, **settings) -> None:
    """As safetensors.numpy.save_file: the same bytes."""
    _save_file(tensor_dict, filename, metadata, fsync=fsync, **settings)


def load(data: bytes) -> dict:
    """As safetensors.numpy.load: the arrays of a safetensors file's bytes."""
    return _load(data, "cpu", "numpy")


def save(tensor_dict: dict, metadata: dict | None = None) -> bytes:
    """As safetensors.numpy.save: the file's bytes."""
    return _save(tensor_dict, metadata)


def safe_open(filename, framework="np", device="cpu", **settings):
    """As safetensors.numpy.safe_open (safetensors.safe_open): framework is "np" unless given."""
    return _safe_open(filename, framework, device, **settings)
