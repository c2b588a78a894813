"""TensorInfo.extra: most tensors have none (no empty dict each); what a reader adds stays with its tensor."""

import pytest

from ckptview.core.checkpoint import Storage, TensorInfo


def _info(**kw: object) -> TensorInfo:
    return TensorInfo("float32", (2,), (1,), 0, Storage("data/0", "float32", 2), **kw)  # type: ignore[arg-type]


def test_no_extra_reads_as_an_empty_read_only_mapping() -> None:
    info = _info()
    assert dict(info.extra) == {} and info.extra.get("shards") is None and "shards" not in info.extra
    with pytest.raises(TypeError):
        info.extra["device"] = "meta"  # type: ignore[index]
    assert "extra={}" in repr(info)


def test_set_extra_adds_to_this_tensor_only() -> None:
    a, b = _info(), _info()
    a.set_extra("device", "meta")
    a.set_extra("nnz", 3)
    assert dict(a.extra) == {"device": "meta", "nnz": 3} and dict(b.extra) == {}
    with pytest.raises(TypeError):
        a.extra["nnz"] = 4  # type: ignore[index]
    assert a.device == "cpu"  # a storage's device wins; extra["device"] is for tensors without one


def test_a_copy_made_from_another_tensors_extra_does_not_write_through() -> None:
    a = _info(extra={"quantization": {"scheme": "per_tensor_affine"}})
    copy = TensorInfo(a.dtype, a.shape, a.stride, a.offset, a.storage, extra=a.extra)
    copy.set_extra("subclass", "my.Tensor")
    assert "subclass" in copy.extra and "subclass" not in a.extra
    empty = _info()
    view = TensorInfo(empty.dtype, empty.shape, empty.stride, 0, empty.storage, extra=empty.extra)
    view.set_extra("device", "meta")
    assert dict(empty.extra) == {}
