"""Device listing: the real machine, and the cuda/mps/xla branches through stand-in torch modules."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from ckptview import cli
from ckptview.core.run.devices import DeviceError, DeviceInfo, find_device, format_table, parse_device
from ckptview.core.worker.device_probe import list_devices


def fake_torch(cuda_built: bool = True, cuda_count: int = 0, cuda_ok: bool = True, init_error: str = "",
               mps_built: bool = False, mps_ok: bool = False, broken_gpu: int = -1) -> SimpleNamespace:
    """A stand-in for the parts of `torch` that device probing touches."""

    def init() -> None:
        if init_error:
            raise RuntimeError(init_error + "\nsecond line of driver noise")

    def props(index: int) -> SimpleNamespace:
        if index == broken_gpu:
            raise RuntimeError("CUDA error: uncorrectable ECC error encountered")
        return SimpleNamespace(name=f"NVIDIA Fake {index}", major=9, minor=0, total_memory=80 * 2**30)

    cuda = SimpleNamespace(device_count=lambda: cuda_count, is_available=lambda: cuda_ok and cuda_count > 0,
                           init=init, get_device_properties=props,
                           mem_get_info=lambda i: (70 * 2**30 - i, 80 * 2**30))
    backends = SimpleNamespace(cuda=SimpleNamespace(is_built=lambda: cuda_built),
                               mps=SimpleNamespace(is_built=lambda: mps_built, is_available=lambda: mps_ok))
    return SimpleNamespace(__version__="9.9", get_num_threads=lambda: 4, cuda=cuda, backends=backends,
                           mps=SimpleNamespace(recommended_max_memory=lambda: 16 * 2**30))


def no_xla() -> None:
    raise ImportError("No module named 'torch_xla'")


def by_name(devices: list[DeviceInfo]) -> dict[str, DeviceInfo]:
    return {d.name: d for d in devices}


def test_real_machine_lists_cpu_and_meta_and_explains_the_rest() -> None:
    devices = by_name(list_devices())
    assert devices["cpu"].available and devices["meta"].available
    assert devices["cpu"].total_memory and "threads" in devices["cpu"].description
    for dev in devices.values():
        assert dev.available or dev.reason, dev
    if not torch.backends.cuda.is_built():
        assert devices["cuda"].reason.startswith("this torch build has no CUDA")


def test_two_gpus_with_details() -> None:
    devices = by_name(list_devices(fake_torch(cuda_count=2), import_xla=no_xla))
    gpu = devices["cuda:1"]
    assert gpu.available and gpu.description == "NVIDIA Fake 1" and gpu.capability == "9.0"
    assert gpu.total_memory == 80 * 2**30 and gpu.free_memory == 70 * 2**30 - 1
    assert devices["mps"].reason.startswith("this torch build has no MPS")
    assert devices["xla"].reason == "torch_xla is not installed"
    assert find_device("cuda", list(devices.values())).name == "cuda:0"
    with pytest.raises(DeviceError, match="cuda:5 is not available: this machine has cuda devices: cuda:0, cuda:1"):
        find_device("cuda:5", list(devices.values()))
    assert "NVIDIA Fake 0, capability 9.0, 70.0 GiB free of 80.0 GiB total" in format_table(list(devices.values()))


def test_one_broken_gpu_does_not_hide_the_other() -> None:
    devices = by_name(list_devices(fake_torch(cuda_count=2, broken_gpu=0), import_xla=no_xla))
    assert not devices["cuda:0"].available
    assert devices["cuda:0"].reason == "driver error: CUDA error: uncorrectable ECC error encountered"
    assert devices["cuda:1"].available


def test_unavailable_cuda_reasons() -> None:
    cpu_build = by_name(list_devices(fake_torch(cuda_built=False), import_xla=no_xla))
    assert cpu_build["cuda"].reason == "this torch build has no CUDA (torch 9.9)"
    no_gpu = by_name(list_devices(fake_torch(cuda_count=0), import_xla=no_xla))
    assert no_gpu["cuda"].reason == "no CUDA device found"
    driver = by_name(list_devices(fake_torch(cuda_count=1, cuda_ok=False,
                                             init_error="Found no NVIDIA driver on your system."),
                                  import_xla=no_xla))
    assert driver["cuda"].reason == "driver error: Found no NVIDIA driver on your system."
    with pytest.raises(DeviceError, match="cuda:0 is not available: driver error: Found no NVIDIA driver"):
        find_device("cuda:0", list(driver.values()))


def test_mps_and_xla_branches() -> None:
    xm = SimpleNamespace(get_xla_supported_devices=lambda: ["TPU:0", "TPU:1"])
    devices = by_name(list_devices(fake_torch(mps_built=True, mps_ok=True), import_xla=lambda: xm))
    assert devices["mps"].available and devices["mps"].total_memory == 16 * 2**30
    assert devices["xla:0"].available and devices["xla:1"].description == "XLA (TPU)"
    devices = by_name(list_devices(fake_torch(mps_built=True, mps_ok=False),
                                   import_xla=lambda: SimpleNamespace(get_xla_supported_devices=lambda: [])))
    assert devices["mps"].reason.startswith("no MPS device")
    assert devices["xla"].reason == "torch_xla found no TPU/XLA device"


def test_a_probe_that_raises_becomes_a_reason() -> None:
    def broken_xla() -> None:
        raise OSError("libtpu.so: cannot open shared object file")

    devices = by_name(list_devices(fake_torch(), import_xla=broken_xla))
    assert devices["xla"].reason == "driver error: libtpu.so: cannot open shared object file"


def test_parse_device() -> None:
    assert parse_device("CUDA") == "cuda:0" and parse_device("xla") == "xla:0" and parse_device("mps") == "mps"
    assert parse_device("cuda:3") == "cuda:3" and parse_device("meta") == "meta"
    for bad in ("gpu", "cuda:x", "cpu:1", ""):
        with pytest.raises(DeviceError):
            parse_device(bad)


@pytest.mark.slow
def test_devices_command_json(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["devices", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert all({"name", "kind", "available", "reason", "description", "capability", "total_memory",
                "free_memory"} <= set(d) for d in listed)
    assert [d["name"] for d in listed if d["available"]][:1] == ["cpu"] and listed[-1]["name"] == "meta"
    assert cli.main(["devices"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("cpu ")


@pytest.mark.slow
def test_devices_command_probes_in_the_worker_process() -> None:
    """`ckptview devices` starts the worker to probe, as the window does: torch and the drivers never load in
    the command's own process (a CUDA context or a driver fault stays out of it)."""
    import subprocess
    import sys

    probe = ("import json, sys\nfrom ckptview.cli import main\nassert main(['devices', '--json']) == 0\n"
             "sys.stderr.write(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'ckptview'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stderr.strip().splitlines()[-1])
    assert "ckptview.commands.devices" in loaded
    assert [m for m in loaded if m == "torch" or m.startswith(("torch.", "ckptview.core.worker"))] == []
    assert [d["name"] for d in json.loads(out.stdout)][:1] == ["cpu"]
