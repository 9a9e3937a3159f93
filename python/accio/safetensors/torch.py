"""Drop-in for safetensors.torch: load_file, save_file, safe_open, load and save with PyTorch
tensors, read and written through accio (docs/safetensors.md). save_model and load_model are not
provided (use safetensors.torch's)."""
from __future__ import annotations

from . import load_file as _load_file, save_file as _save_file, safe_open as _safe_open, load as _load, save as _save

__all__ = ["load_file", "save_file", "safe_open", "load", "save"]


def load_file(filename, device="cpu", *, copy: bool = False, backend: str | None = None, **settings) -> dict:
    """As safetensors.torch.load_file(filename, device): a dict of torch.Tensor on device. filename
    may also be a model.safetensors.index.json or a list of shards (read in parallel). backend, which
    picks safetensors' own way of reading, is accepted and has no effect: accio reads the file."""
    return _load_file(filename, device, "torch", copy=copy, **settings)


def save_file(tensors: dict, filename, metadata: dict | None = None, *, fsync: bool = False, **settings) -> None:
    """As safetensors.torch.save_file: the same bytes; CUDA tensors are written from GPU memory."""
    _save_file(tensors, filename, metadata, fsync=fsync, **settings)


def load(data: bytes, device="cpu") -> dict:
    """As safetensors.torch.load: the tensors of a safetensors file's bytes."""
    return _load(data, device, "torch")


def save(tensors: dict, metadata: dict | None = None) -> bytes:
    """As safetensors.torch.save: the file's bytes."""
    return _save(tensors, metadata)


def safe_open(filename, framework="pt", device="cpu", **settings):
    """As safetensors.torch.safe_open (safetensors.safe_open): framework is "pt" unless given."""
    return _safe_open(filename, framework, device, **settings)
