"""Count the host reads of device-side tensors that would synchronise on a GPU.

On CUDA, ``torch.cuda.set_sync_debug_mode`` reports every host-device
synchronisation, and it stays the authority. A CPU-only machine has no such
signal: every tensor is a host tensor. This module is a proxy for it. The
caller marks the tensors that would live on the device (the metadata builder's
device-side inputs and persistent buffers); the tracker follows everything
computed from them and counts the operations that would have to wait for the
device to bring such a tensor's data into host memory (``.item()``, ``.cpu()``,
``bool()``, ``nonzero``, bool-mask indexing, ``copy_`` into a host buffer...).

It sees only calls that pass through torch's function layer, so a read inside a
custom kernel is missed, and so is a device tensor the tracker cannot trace to a
marked one (say, a fresh ``torch.zeros(n, device=device)``: a ``copy_`` into it
counts as a copy to the host). Where the device is the CPU it cannot tell
``.to(device)`` from ``.to("cpu")``; both count.

    tracker = DeviceOriginReads()
    tracker.mark(m.query_start_loc, m.seq_lens)
    tracker.mark_attributes(builder)
    with tracker:
        builder.build(...)
    assert tracker.total == 0, tracker.reads

Imports only the standard library and torch, so it can be copied verbatim.
"""

from __future__ import annotations

import collections

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

# Reads whose result is a host value or a host tensor, not device-origin.
_HOST_COPIES = frozenset(
    {"item", "tolist", "numpy", "cpu", "equal", "allclose", "__contains__"}
    | {"__bool__", "__int__", "__float__", "__index__"}
)
# Ops whose output size depends on the data: the host waits for the device to
# report the size, but the result itself stays on the device.
_SIZE_SYNCS = frozenset(
    {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive"}
)
# Ops that take sizes or scalars: a device tensor there is read as a Python number.
_SCALAR_ARGS = frozenset(
    {"zeros", "ones", "empty", "full", "arange", "range", "linspace"}
    | {"rand", "randn", "randint", "new_zeros", "new_ones", "new_empty", "new_full"}
)
_MASK_DTYPES = (torch.bool, torch.uint8)


def _label(func) -> str:
    qualname = getattr(func, "__qualname__", "") or ""
    owner = "Tensor" if qualname.startswith(("TensorBase.", "Tensor.")) else "torch"
    return f"{owner}.{getattr(func, '__name__', repr(func))}"


def _tensors(tree) -> list[torch.Tensor]:
    leaves = []
    for leaf in tree_flatten(tree)[0]:
        # pytree keeps a slice whole, and its bounds may be tensors (x[:n]).
        is_slice = isinstance(leaf, slice)
        leaves.extend((leaf.start, leaf.stop, leaf.step) if is_slice else (leaf,))
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


class DeviceOriginReads(TorchFunctionMode):
    """A function mode counting host reads of device-origin tensors (see above)."""

    def __init__(self) -> None:
        super().__init__()
        # Weak keys: tracking must not keep tensors alive nor set attributes on them.
        self._origin = WeakIdKeyDictionary()
        self.reads: collections.Counter[str] = collections.Counter()

    @property
    def total(self) -> int:
        return sum(self.reads.values())

    def mark(self, *tensors: torch.Tensor | None) -> None:
        """Declare tensors device-origin; anything else (None) is ignored."""
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor):
                self._origin[tensor] = True

    def mark_attributes(self, obj) -> None:
        """Declare obj's tensor attributes device-origin (a builder's buffers)."""
        self.mark(*vars(obj).values())

    def is_device_origin(self, value) -> bool:
        return isinstance(value, torch.Tensor) and value in self._origin

    def _read(self, func, name: str, args, kwargs) -> tuple[str, bool] | None:
        """(label, result is on the host) when the call reads device data."""
        origin = self.is_device_origin
        one_arg_where = name == "where" and len(args) + len(kwargs) == 1
        if name in _HOST_COPIES or name in _SIZE_SYNCS or one_arg_where:
            hit = any(map(origin, _tensors((args, kwargs))))
            return (_label(func), name in _HOST_COPIES) if hit else None
        if name in _SCALAR_ARGS:
            sizes = args[1:] if name.startswith("new_") else args
            rest = {key: value for key, value in kwargs.items() if key != "out"}
            if not any(map(origin, _tensors((sizes, rest)))):
                return None
            # Without device= the real result is a host tensor.
            return f"{_label(func)}[tensor arg]", "device" not in kwargs
        if name == "repeat_interleave" and kwargs.get("output_size") is None:
            # Tensor repeats and no output_size: the length is read from the device.
            first = args[0] if args else None
            repeats = args[1] if len(args) > 1 else kwargs.get("repeats", first)
            return (_label(func), False) if origin(repeats) else None
        if name in ("__getitem__", "__setitem__"):
            leaves = tree_flatten(args[1])[0]
            value = args[2] if name == "__setitem__" else None
            masks = any(origin(t) and t.dtype in _MASK_DTYPES for t in leaves)
            # x[mask] = scalar becomes masked_fill_, which needs no sync.
            scalar = not isinstance(value, torch.Tensor) or value.numel() == 1
            if masks and (value is None or not scalar):
                # The mask's nonzero runs on the device.
                return f"Tensor.{name}[bool mask]", False
            slices = [leaf for leaf in leaves if isinstance(leaf, slice)]
            if any(map(origin, _tensors(slices))):
                return f"Tensor.{name}[tensor slice bound]", not origin(args[0])
            if origin(value) and not origin(args[0]):
                return "Tensor.__setitem__[to host]", True
            return None
        if name == "copy_":
            # Copies between device-origin tensors (staging into persistent
            # buffers) are not reads.
            to_host = origin(args[1]) and not origin(args[0])
            return ("Tensor.copy_[to host]", True) if to_host else None
        if name == "to" and origin(args[0]):
            target = kwargs.get("device", args[1] if len(args) > 1 else None)
            if isinstance(target, (str, torch.device)):
                to_host = torch.device(target).type == "cpu"
            else:  # x.to(other) takes other's device
                to_host = isinstance(target, torch.Tensor) and not origin(target)
            return ("Tensor.to[cpu]", True) if to_host else None
        return None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # torch pops this mode while the handler runs, so the calls made here
        # (func itself, tensor._base, numel) are neither seen nor counted.
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        touches_origin = any(map(self.is_device_origin, _tensors((args, kwargs))))
        read = self._read(func, name, args, kwargs) if touches_origin else None
        result = func(*args, **kwargs)
        if read is not None:
            self.reads[read[0]] += 1
            if read[1] and self.is_device_origin(result):
                # On the CPU, x.cpu() and x.to("cpu") return x itself; a new view
                # stands for the host copy so that it is not device-origin.
                result = result.view_as(result)
        if touches_origin and not (read is not None and read[1]):
            written = _tensors(kwargs.get("out"))
            in_place = name.endswith("_") and not name.startswith("__")
            if (in_place or name == "__setitem__") and args:
                written.extend(_tensors(args[0]))
            # A write into a view lands in its base too: cumsum(out=buf[1:]) fills buf.
            self.mark(*_tensors(result), *written, *(t._base for t in written))
        return result
