"""Drop-in for safetensors.torch: load_file, save_file and safe_open with PyTorch tensors, read and
written through accio (docs/safetensors.md)."""
from __future__ import annotations

from . import load_file as _load_file, save_file as _save_file, safe_open as _safe_open

__all__ = ["load_file", "save_file", "safe_open"]


def load_file(filename, device="cpu", *, copy: bool = False, **settings) -> dict:
    """As safetensors.torch.load_file(filename, device): a dict of torch.Tensor on device. filename
    may also be a model.safetensors.index.json or a list of shards (read in parallel)."""
    return _load_file(filename, device, "torch", copy=copy, **settings)


def save_file(tensors: dict, filename, metadata: dict | None = None, *, fsync: bool = False, **settings) -> None:
    """As safetensors.torch.save_file: the same bytes; CUDA tensors are written from GPU memory."""
    _save_file(tensors, filename, metadata, fsync=fsync, **settings)


def safe_open(filename, device="cpu", **settings):
    """As safetensors.safe_open(filename, framework="pt", device=device)."""
    return _safe_open(filename, "torch", device, **settings)
