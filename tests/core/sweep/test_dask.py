"""Whole-checkpoint work on a real Dask cluster (`dask scheduler` + `dask worker` processes started here):
the figures of the local run, bit for bit; each worker reads the files itself, the caller none of their
values; a worker lost mid-run is retried without a wrong figure; S3 objects read by the workers from a real
S3 server (moto's), their credentials the workers' own, never in a task or in what is printed."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pickle

import pytest
import torch

distributed = pytest.importorskip("distributed")

from ckptview.cli import main  # noqa: E402
from ckptview.core.read.bytes.files import FileMap  # noqa: E402
from ckptview.core.read.bytes.remote.options import RemoteOptions  # noqa: E402
from ckptview.core.read.open import open_checkpoint  # noqa: E402
from ckptview.core.sweep import runner as sweep_runner  # noqa: E402
from ckptview.core.sweep import stats as sweep_stats  # noqa: E402
from ckptview.core.sweep.listing import listing_figures  # noqa: E402
from ckptview.core.sweep.plan import Work, cut, task_bytes  # noqa: E402
from ckptview.core.sweep.runner import Placement  # noqa: E402
from tests.support.dask_processes import DaskProcesses, KillFirstTask  # noqa: E402

pytestmark = pytest.mark.slow
SECRET = "s3cr3t-KEY-that-must-never-show"


def _one_server_header(app):
    """moto names its server and werkzeug names itself too: a client that checks headers strictly (aiohttp's
    own parser under `python -X dev`) refuses the second `Server` header. Both are left out."""
    def wrapped(environ, start_response):
        def start(status, headers, *args):
            return start_response(status, [(k, v) for k, v in headers if k.lower() != "server"], *args)

        return app(environ, start)

    return wrapped


@pytest.fixture(scope="module")
def s3_env():
    """A real S3-compatible server (moto's server mode) on 127.0.0.1, and the environment that reaches it."""
    moto_server = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    class Server(moto_server.ThreadedMotoServer):
        def _server_entry(self):  # moto's own, its application's headers cleaned
            app = _one_server_header(DomainDispatcherApplication(create_backend_app))
            self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
            self._server_ready_event.set()
            self._server.serve_forever()

    server = Server(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "ckptview-test", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()
        yield env
        s3fs.S3FileSystem.clear_instance_cache()
    server.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_env):
    """Two workers (one thread each), started with the S3 environment: their own credentials."""
    procs = DaskProcesses(tmp_path_factory.mktemp("dask"), workers=2, env=s3_env)
    yield procs
    procs.close()


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _json(argv: list[str]) -> dict:
    code, out, err = _run(argv)
    assert code in (0, 1), err
    return json.loads(out)


@pytest.mark.parametrize("which", ["llama_folder", "mixed_pt"])
def test_info_stats_and_spectra_on_dask_equal_the_local_run(cluster, which, request):
    path = str(request.getfixturevalue(which))
    local = _json(["info", path, "--json", "--stats", "--spectral", "--workers", "1"])
    remote = _json(["info", path, "--json", "--stats", "--spectral", "--scheduler", cluster.address])
    assert remote == local
    assert any(t.get("spectral") for t in local["tensors"]) and all("stats" in t for t in local["tensors"])
    assert local["modules"] and remote["modules"] == local["modules"]


def test_the_caller_reads_no_value_and_every_task_is_counted(cluster, mixed_pt, monkeypatch):
    ckpt = open_checkpoint(str(mixed_pt))
    read: list[int] = []
    real = FileMap.readinto

    def counted(self, offset, buf, *args, **kwargs):
        read.append(len(memoryview(buf)))
        return real(self, offset, buf, *args, **kwargs)

    monkeypatch.setattr(FileMap, "readinto", counted)  # this process only: the workers read their own
    entries = ckpt.tensors()
    stats_of = [i for i, e in enumerate(entries) if e.info.storage is not None]
    spectra_of = [i for i, e in enumerate(entries) if len(e.info.shape) >= 2 and min(e.info.shape) >= 2
                  and e.info.dtype.startswith(("float", "bfloat"))]
    client = cluster.client()
    found = listing_figures(ckpt, str(mixed_pt), RemoteOptions(), Placement(client), stats_of, spectra_of)
    assert found is not None and read == []
    slots = sum(client.nthreads().values())
    planned = len(sweep_stats.stats_tasks([(i, entries[i]) for i in stats_of], str(mixed_pt), RemoteOptions(),
                                          slots, {}))
    weights = [Work(i, entries[i].name, entries[i].info.nbytes) for i in spectra_of]
    spectra_tasks = len(cut(weights, task_bytes(sum(w.nbytes for w in weights), slots), 1))
    assert found.report.tasks == planned + spectra_tasks
    assert found.report.bytes_read >= sum(entries[i].info.nbytes for i in stats_of if entries[i].info.numel)
    assert set(found.stats) == set(stats_of) and set(found.spectra) == set(spectra_of)
    ckpt.close()


def test_a_worker_lost_mid_run_is_retried_without_a_wrong_figure(cluster, llama_folder, tmp_path):
    local = _json(["info", str(llama_folder), "--json", "--stats", "--workers", "1"])
    client = cluster.client()
    flag = tmp_path / "killed"
    client.register_plugin(KillFirstTask(str(flag)), name=KillFirstTask.name)
    try:
        remote = _json(["info", str(llama_folder), "--json", "--stats", "--scheduler", cluster.address])
    finally:
        client.unregister_worker_plugin(KillFirstTask.name)
    assert flag.exists()  # a worker died as it started a task
    assert remote == local
    client.wait_for_workers(2, timeout=180)  # its nanny started it again


def _perturbed(folder, tmp_path, dtype=None):
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    torch.manual_seed(5)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 1e-2)
    if dtype is not None:
        model = model.to(dtype)
    out = tmp_path / "other"
    model.save_pretrained(out, safe_serialization=True, max_shard_size="150KB")
    return out


def test_diff_on_dask_equals_the_local_comparison(cluster, llama_folder, tmp_path):
    other = _perturbed(llama_folder, tmp_path)
    local = _json(["diff", str(llama_folder), str(other), "--json", "--workers", "1"])
    remote = _json(["diff", str(llama_folder), str(other), "--json", "--scheduler", cluster.address])
    assert remote == local
    assert local["summary"]["changed"] > 0 and local["overall_rel_l2"] > 0


def test_the_quantized_comparison_on_dask_equals_the_local_one(cluster, llama_folder, tmp_path):
    # A base model against a lower-precision copy of itself: what the cast cost, per weight.
    other = _perturbed(llama_folder, tmp_path, torch.float16)
    local = _json(["diff", str(llama_folder), str(other), "--json", "--workers", "1"])
    remote = _json(["diff", str(llama_folder), str(other), "--json", "--scheduler", cluster.address])
    assert remote == local
    assert local["summary"]["dtype_mismatch"] > 0


def _digest(path) -> dict[str, str]:
    paths = {n: os.path.join(path, n) for n in sorted(os.listdir(path))} if os.path.isdir(path) else {"": path}
    out = {}
    for name, one in paths.items():
        with open(one, "rb") as fh:
            out[name] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.mark.parametrize("out", ["npy/", "x.npz", "x.safetensors"])
def test_export_on_dask_writes_the_same_bytes(cluster, mixed_pt, tmp_path, out):
    code, _, err = _run(["export", str(mixed_pt), "--out", str(tmp_path / "one" / out), "--workers", "1"])
    assert code == 0, err
    code, _, err = _run(["export", str(mixed_pt), "--out", str(tmp_path / "dask" / out), "--scheduler",
                         cluster.address])
    assert code == 0, err
    assert _digest(tmp_path / "dask" / out.rstrip("/")) == _digest(tmp_path / "one" / out.rstrip("/"))


def test_s3_objects_are_read_by_the_workers_themselves(cluster, s3_env, llama_folder, mixed_pt, monkeypatch):
    boto3 = pytest.importorskip("boto3")
    s3 = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"])
    s3.create_bucket(Bucket="ckpts")
    for name in sorted(os.listdir(llama_folder)):
        s3.put_object(Bucket="ckpts", Key=f"llama/{name}", Body=(llama_folder / name).read_bytes())
    s3.put_object(Bucket="ckpts", Key="mixed.pt", Body=mixed_pt.read_bytes())
    for url, local_path in (("s3://ckpts/llama", llama_folder), ("s3://ckpts/mixed.pt", mixed_pt)):
        local = _json(["info", str(local_path), "--json", "--stats", "--spectral", "--workers", "1"])
        code, out, err = _run(["info", url, "--json", "--stats", "--spectral", "--scheduler", cluster.address])
        assert code == 0, err
        remote = json.loads(out)
        assert SECRET not in out + err
        assert remote["tensors"] == local["tensors"] and remote["modules"] == local["modules"]

    # The caller's own transfer: the headers it listed, nothing more while the workers read the values.
    ckpt = open_checkpoint("s3://ckpts/mixed.pt")
    transfer = ckpt.metadata["_transfer"]
    before = transfer.bytes
    sent: list[bytes] = []
    real_run = sweep_runner.Sweep.run

    def keep(self, fn, tasks, token=None):
        sent.append(pickle.dumps(list(tasks)))
        return real_run(self, fn, tasks, token)

    monkeypatch.setattr(sweep_runner.Sweep, "run", keep)
    entries = ckpt.tensors()
    stats_of = [i for i, e in enumerate(entries) if e.info.storage is not None]
    found = listing_figures(ckpt, "s3://ckpts/mixed.pt", RemoteOptions(), Placement(cluster.client()), stats_of)
    assert found is not None and transfer.bytes == before  # not one byte of values through the caller
    assert found.report.bytes_read >= sum(entries[i].info.nbytes for i in stats_of)
    assert sent and all(SECRET.encode() not in s and b"ckptview-test" not in s for s in sent)
    ckpt.close()

    # A diff of two S3 folders, both read by the workers.
    other = _perturbed(llama_folder, llama_folder.parent / "s3-other")
    for name in sorted(os.listdir(other)):
        s3.put_object(Bucket="ckpts", Key=f"other/{name}", Body=(other / name).read_bytes())
    local = _json(["diff", str(llama_folder), str(other), "--json", "--workers", "1"])
    remote = _json(["diff", "s3://ckpts/llama", "s3://ckpts/other", "--json", "--scheduler", cluster.address])
    assert {k: v for k, v in remote.items() if k not in ("a", "b")} == {k: v for k, v in local.items()
                                                                         if k not in ("a", "b")}


def test_an_unreachable_scheduler_is_one_line(mixed_pt, monkeypatch):
    from ckptview.core.cluster import scheduler

    monkeypatch.setattr(scheduler, "CONNECT_TIMEOUT", 2)  # distributed retries a refused port until then
    code, out, err = _run(["info", str(mixed_pt), "--stats", "--scheduler", "tcp://127.0.0.1:9"])
    assert code == 2 and out == ""
    assert err.startswith("ckptview: cannot reach the Dask scheduler tcp://127.0.0.1:9") and err.count("\n") == 1
