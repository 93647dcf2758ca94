"""tools/mlp-peer, the project's own DDP baseline for the MLP job: it
trains 2 processes on Fashion-MNIST and reports each epoch; bad input is
named before any process starts."""
import json
import os
import subprocess

import pytest

pytest.importorskip("torch")

PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "mlp-peer")
DATA = "/usr/share/datasets/fashion-mnist"


def run(*args, timeout=240):
    return subprocess.run(["/usr/bin/python3", PEER, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)


@pytest.mark.skipif(not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")),
                    reason="no Fashion-MNIST (apt-get install dataset-fashion-mnist)")
def test_two_ddp_processes_learn_and_report_each_epoch(tmp_path):
    out = tmp_path / "peer.jsonl"
    p = run("--epochs", "2", "--limit", "6000", "--out", str(out))
    assert p.returncode == 0, p.stdout
    lines = [json.loads(l) for l in out.read_text().splitlines()]
    assert [l["epoch"] for l in lines] == [1, 2] and all(l["workers"] == 2 for l in lines)
    assert lines[1]["train_loss"] < lines[0]["train_loss"] and lines[1]["test_acc"] > 0.5, lines
    assert "[mlp/ddp] epoch  2" in p.stdout, p.stdout


def test_bad_input_is_named_before_anything_starts(tmp_path):
    p = run("--data", str(tmp_path))
    assert p.returncode != 0 and f"missing {tmp_path}/train-images-idx3-ubyte.gz" in p.stdout, p.stdout
    p = run("--epochs", "0")
    assert p.returncode == 2 and "--epochs must be at least 1" in p.stdout, p.stdout
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"not gzip at all")
    for f in ("train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        (tmp_path / f).write_bytes(b"")
    p = run("--data", str(tmp_path))
    assert p.returncode != 0 and "Traceback" not in p.stdout, p.stdout
    assert f"mlp-peer: cannot read {tmp_path}/train-images-idx3-ubyte.gz: Not a gzipped file" in p.stdout, p.stdout
