"""Files read beside a checkpoint (a model folder's config.json) go through the byte layer too.

A FIFO named `config.json` in a downloaded folder must be refused, not read: a plain `open()` blocks until
a writer appears (the worker or the window's job hangs), and reads whatever that writer sends. The test
plays that writer from a thread, so a regression reads its bytes (and fails on what it parsed) instead of
hanging: no timing is involved.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
WRITTEN = json.dumps({"architectures": ["BertModel"], "model_type": "bert"}).encode()


class FifoWriter:
    """Writes WRITTEN to a FIFO whenever a reader opens it, until stopped; counts the readers it found."""

    def __init__(self, path: str) -> None:
        self.path, self.served = path, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while no reader has it open
            except OSError:
                self._stop.wait(0.005)
                continue
            self.served += 1  # a reader has it open
            try:
                os.write(fd, WRITTEN)
            except OSError:  # the reader closed it first
                pass
            finally:
                os.close(fd)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.served


@pytest.fixture
def fifo_folder(tmp_path):
    os.mkfifo(tmp_path / "config.json")
    writer = FifoWriter(str(tmp_path / "config.json"))
    yield tmp_path
    writer.stop()
    assert writer.served == 0, "the FIFO was opened and read"


@needs_fifo
def test_the_trainer_folder_order_never_reads_a_fifo_config(fifo_folder):
    from ckptview.core.inspect.hf_order import architecture

    assert architecture(str(fifo_folder)) is None


@needs_fifo
def test_a_run_never_reads_a_fifo_config(fifo_folder):
    from ckptview.core.run.architectures import ArchitectureRefused, read_config

    with pytest.raises(ArchitectureRefused, match="FIFO"):
        read_config(str(fifo_folder / "config.json"))


@needs_fifo
def test_the_safetensors_header_check_never_reads_a_fifo(tmp_path):
    from ckptview.core.session.file_checks import safetensors_header_size

    os.mkfifo(tmp_path / "model.safetensors")
    writer = FifoWriter(str(tmp_path / "model.safetensors"))
    assert safetensors_header_size(str(tmp_path / "model.safetensors")) is None
    assert writer.stop() == 0
