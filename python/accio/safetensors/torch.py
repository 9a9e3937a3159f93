"""Drop-in for safetensors.torch: load_file, save_file, safe_open, load, save, save_model and
load_model with PyTorch tensors, read and written through accio (docs/safetensors.md)."""
from __future__ import annotations

import os

from . import load_file as _load_file, save_file as _save_file, safe_open as _safe_open, load as _load, save as _save

__all__ = ["load_file", "save_file", "safe_open", "load", "save", "save_model", "load_model"]


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


# --- models: tied weights (several state_dict names for one storage) -------------------------------

def _shared_groups(spans: dict) -> list[list[str]]:
    """The names that share memory, as safetensors.torch's _find_shared_tensors and
    _filter_shared_not_shared group them, from plain facts (torch-free, so that CI tests it):
    spans maps name -> (storage key, start, stop) or None for a tensor with no storage (meta, or an
    empty storage). Names with one key are split where their [start, stop) ranges stop overlapping
    (walked in (start, stop, name) order, each range compared with the one before it). Every name
    with a storage is in exactly one group; groups sorted by their first name."""
    by_key: dict = {}
    for name, span in spans.items():
        if span is not None:
            by_key.setdefault(span[0], []).append((span[1], span[2], name))
    groups = []
    for areas in by_key.values():
        areas.sort()
        _, last_stop, first = areas[0]
        groups.append([first])
        for start, stop, name in areas[1:]:
            if start >= last_stop:
                groups.append([name])
            else:
                groups[-1].append(name)
            last_stop = stop
    return sorted(sorted(g) for g in groups)


def _duplicates(groups: list, complete: set, preferred=(), discard=()) -> dict[str, list[str]]:
    """safetensors.torch's _remove_duplicate_names on _shared_groups' groups: for each group, the name
    to keep -> the others (sorted). The kept name covers its whole storage (complete): the smallest
    such name, preferring names not in discard, then names in preferred. A group none of whose names
    covers its storage is refused with safetensors' RuntimeError (saving it would store more than
    the tensors hold)."""
    preferred, discard = set(preferred), set(discard)
    out: dict[str, list[str]] = {}
    for shared in groups:
        full = sorted(n for n in shared if n in complete)
        if not full:
            raise RuntimeError(
                "Error while trying to find names to remove to save state dict, but found no suitable name to keep"
                f" for saving amongst: {set(shared)}. None is covering the entire storage.Refusing to save/load the "
                "model since you could be storing much more memory than needed. Please refer to"
                " https://huggingface.co/docs/safetensors/torch_shared_tensors for more information. Or open an"
                " issue.")
        keep = full[0]
        kept = [n for n in full if n not in discard]
        if kept:
            keep = kept[0]
        pref = [n for n in full if n in preferred]
        if pref:
            keep = pref[0]
        others = [n for n in shared if n != keep]
        if others:
            out[keep] = others
    return out


def _remove_duplicate_names(state_dict: dict, *, preferred_names=None, discard_names=None) -> dict[str, list[str]]:
    """As safetensors.torch._remove_duplicate_names: kept name -> the names of the same memory to drop."""
    spans, complete = {}, set()
    for name, t in state_dict.items():
        spans[name] = None
        if t.device.type == "meta":
            continue
        storage = t.untyped_storage()
        base, size = storage.data_ptr(), storage.nbytes()
        if not base or not size:
            continue
        item = t.element_size()
        start = t.data_ptr()
        # the byte after the tensor's last element (safetensors: view(-1)[-1], for contiguous tensors)
        stop = start + (sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if s > 0) + 1) * item if t.numel() else start
        spans[name] = ((str(t.device), base, size), start, stop)
        if start == base and t.numel() * item == size:
            complete.add(name)
    return _duplicates(_shared_groups(spans), complete, preferred_names or (), discard_names or ())


def save_model(model, filename, metadata: dict | None = None, force_contiguous: bool = True, **settings) -> None:
    """As safetensors.torch.save_model: model.state_dict() saved with each group of tied weights (names
    sharing one storage) written once, under the smallest name that covers the storage; each dropped
    name is recorded in the metadata as dropped name -> kept name (the caller's own entries win; the
    caller's dict is not changed). force_contiguous saves t.contiguous() of every tensor. Other keyword
    arguments are save_file's (fsync=True, accio settings)."""
    state_dict = model.state_dict()
    meta = None if metadata is None else dict(metadata)
    for kept, dropped in _remove_duplicate_names(state_dict).items():
        for name in dropped:
            if meta is None:
                meta = {}
            meta.setdefault(name, kept)
            del state_dict[name]
    if force_contiguous:
        state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    try:
        _save_file(state_dict, filename, meta, **settings)
    except ValueError as e:  # safetensors' hint, as it adds it
        msg = str(e).rstrip(".")
        raise ValueError(f"{msg}. Or use save_model(..., force_contiguous=True), read the docs for potential "
                         "caveats.") from e


def load_model(model, filename: str | os.PathLike, strict: bool = True, device="cpu", *,
               backend: str | None = None, **settings) -> tuple:
    """As safetensors.torch.load_model: the file's tensors loaded into model (load_state_dict); a tied
    weight the file holds under one of its names counts as loaded under all of them. Returns (missing,
    unexpected): a set of the model's names the file did not set, a list of the file's names the model
    does not have (a second name of a tied weight among them). strict=True raises safetensors'
    RuntimeError when either is not empty. backend is accepted and has no effect (accio reads the
    file); other keyword arguments are accio settings."""
    state_dict = _load_file(filename, device, "torch", **settings)
    to_removes = _remove_duplicate_names(model.state_dict(), preferred_names=state_dict.keys())
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = set(missing)
    for group in to_removes.values():
        for name in group:
            if name not in missing:
                unexpected.append(name)
            else:
                missing.remove(name)
    if strict and (missing or unexpected):
        error = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            error += "\n    Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(missing))
        if unexpected:
            error += "\n    Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(unexpected))
        raise RuntimeError(error)
    return missing, unexpected
