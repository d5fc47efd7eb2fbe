"""The CPU proxy for host-device syncs: what it counts, what it does not, and how far marks
spread."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import torch

from gdn_review.harness.sync_proxy import DeviceOriginReads


def _tracker(*device_tensors):
    tracker = DeviceOriginReads()
    tracker.mark(*device_tensors)
    return tracker


def _query_start_loc():
    # A marked device-side query_start_loc and its unmarked host twin.
    return torch.tensor([0, 3, 6, 9], dtype=torch.int32), torch.tensor(
        [0, 3, 6, 9], dtype=torch.int32
    )


# vLLM 0.29.0 build_for_cudagraph_capture: the draft counts come from the device tensor.
def _capture_0_29(m):
    num_accepted_tokens = torch.diff(m.query_start_loc)
    return (num_accepted_tokens - 1).cpu()


# vLLM 0.31.0: the same counts from the host twin, so no sync.
def _capture_0_31(m):
    return torch.diff(m.query_start_loc_cpu).sub_(1)


def test_capture_0_29_reads_the_device_once_and_0_31_never():
    device, host = _query_start_loc()
    m = SimpleNamespace(query_start_loc=device, query_start_loc_cpu=host)
    for capture, expected in ((_capture_0_29, {"Tensor.cpu": 1}), (_capture_0_31, {})):
        tracker = _tracker(m.query_start_loc, None)
        with tracker:
            drafts = capture(m)
        assert drafts.tolist() == [2, 2, 2]
        assert tracker.reads == Counter(expected), capture.__name__
        assert tracker.total == sum(expected.values())


def test_scalar_reads_count_on_derived_tensors_only():
    device, host = _query_start_loc()
    tracker = _tracker(device)
    with tracker:
        derived = device[1:] - device[:-1]
        derived.sum().item()
        derived.tolist()
        bool(derived.any())
        int(derived[0])
        float(derived[1])
        host_lens = host[1:] - host[:-1]
        host_lens.sum().item()
        host_lens.tolist()
        bool(host_lens.any())
        int(host_lens[0])
    assert tracker.reads == Counter(
        {
            "Tensor.item": 1,
            "Tensor.tolist": 1,
            "Tensor.__bool__": 1,
            "Tensor.__int__": 1,
            "Tensor.__float__": 1,
        }
    )
    assert tracker.total == 5


def test_mask_indexing_counts_a_device_mask_only():
    device, host = _query_start_loc()
    block_table = torch.arange(8).reshape(4, 2)
    tracker = _tracker(device, block_table)
    with tracker:
        block_table[device > 3, :1]  # device mask: nonzero on the device
        host[device > 3]  # device mask on a host tensor
        block_table[host > 3, :1]  # host mask into a device tensor: no read
        host[host > 3]  # all on the host
        torch.nonzero(device)
        device.nonzero()
        torch.where(device > 3)
    assert tracker.reads == Counter(
        {
            "Tensor.__getitem__[bool mask]": 2,
            "torch.nonzero": 1,
            "Tensor.nonzero": 1,
            "torch.where": 1,
        }
    )


def test_copy_into_a_host_buffer_counts_and_into_a_persistent_buffer_does_not():
    device, _ = _query_start_loc()
    builder = SimpleNamespace(buffer=torch.zeros(8, dtype=torch.int32), num_spec=2, none=None)
    host_buffer = torch.zeros(8, dtype=torch.int32)
    tracker = _tracker(device)
    tracker.mark_attributes(builder)
    with tracker:
        builder.buffer[:4].copy_(device, non_blocking=True)  # staging: device to device
        host_buffer[:4].copy_(device)  # device to host
        builder.buffer[:4].copy_(host_buffer[:4])  # host to device
        host_buffer[4:].copy_(host_buffer[:4])  # host to host
    assert tracker.reads == Counter({"Tensor.copy_[to host]": 1})
    assert tracker.is_device_origin(builder.buffer)
    assert not tracker.is_device_origin(host_buffer)


def test_setitem_reads_only_what_a_device_would_read():
    device, host = _query_start_loc()
    persistent = torch.zeros(4, dtype=torch.int32)
    host_buffer = torch.zeros(4, dtype=torch.int32)
    written = host.clone()
    tracker = _tracker(device, persistent)
    with tracker:
        persistent[device > 3] = 0  # a scalar through a mask is masked_fill_: no read
        persistent[device > 3] = torch.tensor(
            [7, 8], dtype=torch.int32
        )  # values need the mask's nonzero
        persistent[:3] = device[1:]  # device to device
        host_buffer[:3] = device[1:]  # device to host
        host_buffer[:3] = host[1:]  # host to host
        written[host > 3] = 0  # host mask, host tensor: stays host
        assert not tracker.is_device_origin(written)
        written[device > 3] = 0  # written through a device mask: device data now
    assert tracker.reads == Counter(
        {"Tensor.__setitem__[bool mask]": 1, "Tensor.__setitem__[to host]": 1}
    )
    assert not tracker.is_device_origin(host_buffer)
    assert tracker.is_device_origin(written)


def test_marks_spread_through_views_arithmetic_and_in_place_ops():
    device, host = _query_start_loc()
    tracker = _tracker(device)
    with tracker:
        view = device[1:]
        reshaped = device.view(2, 2).t()
        arithmetic = (view * 2 + 1).to(torch.int64)
        staged = host.clone()
        staged.add_(device)  # a host tensor written with device data is a device tensor
        out_base = torch.zeros(4, dtype=torch.int32)
        torch.cumsum(device[:3], dim=0, out=out_base[1:])  # out= a view fills its base
        untouched = host * 2
    for tensor in (view, reshaped, arithmetic, staged, out_base):
        assert tracker.is_device_origin(tensor)
    assert not tracker.is_device_origin(host)
    assert not tracker.is_device_origin(untouched)
    assert tracker.total == 0
    with tracker:
        for tensor in (view, reshaped, arithmetic, staged, out_base):
            tensor.sum().item()
        untouched.sum().item()
    assert tracker.reads == Counter({"Tensor.item": 5})


def test_the_result_of_a_host_read_is_a_host_tensor():
    device, _ = _query_start_loc()
    tracker = _tracker(device)
    with tracker:
        on_host = (device * 2).cpu()
        on_host[-1].item()  # reads host memory: no second sync
        also_host = device.to("cpu")
        also_host.tolist()
        device.to(torch.device("cpu"), non_blocking=True)
        device.to(torch.int64)  # a dtype change stays on the device
    assert tracker.reads == Counter({"Tensor.cpu": 1, "Tensor.to[cpu]": 2})
    assert not tracker.is_device_origin(on_host)
    assert not tracker.is_device_origin(also_host)


def test_data_dependent_sizes_and_scalar_arguments():
    device, host = _query_start_loc()
    tracker = _tracker(device)
    with tracker:
        lens = device[1:] - device[:-1]
        torch.repeat_interleave(torch.ones(3), lens)  # output length read from the device
        torch.repeat_interleave(torch.ones(3), lens, output_size=9)  # given: no read
        torch.arange(device[-1])  # a device scalar as a size
        host[: device[1]]  # a device scalar as a slice bound
        torch.arange(int(host[-1]))
    assert tracker.reads == Counter(
        {
            "torch.repeat_interleave": 1,
            "torch.arange[tensor arg]": 1,
            "Tensor.__getitem__[tensor slice bound]": 1,
        }
    )


def test_the_mode_leaves_nothing_behind():
    device, _ = _query_start_loc()
    tracker = _tracker(device)
    with tracker:
        device.sum().item()
    assert tracker.total == 1
    after = device * 2
    after.cpu()
    after.tolist()
    bool(after.any())
    assert tracker.reads == Counter({"Tensor.item": 1})
    assert not tracker.is_device_origin(after)  # not traced outside the block either
    assert torch.overrides._get_current_function_mode_stack() == []


def test_marks_are_weak():
    import gc
    import weakref

    tracker = DeviceOriginReads()
    tensor = torch.ones(3)
    tracker.mark(tensor)
    ref = weakref.ref(tensor)
    assert tracker.is_device_origin(tensor)
    assert not hasattr(tensor, "__dict__") or not vars(tensor)  # nothing set on the tensor
    del tensor
    gc.collect()
    assert ref() is None
    assert len(tracker._origin) == 0
