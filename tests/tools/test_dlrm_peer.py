"""tools/dlrm-peer: the project's own one-process PyTorch DLRM (the peer
tools/dlrm-bench pairs shardps-worker with), on a small planted-teacher log."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(__file__)
PEER = os.path.join(HERE, "..", "..", "tools", "dlrm-peer")
MAKE_CLICKS = os.path.join(HERE, "..", "..", "tools", "make-clicks")

torch = pytest.importorskip("torch", reason="the peer needs python3-torch")


def peer(*args):
    return subprocess.run([sys.executable, PEER, *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def clicks(tmp_path_factory):
    d = tmp_path_factory.mktemp("clicks")
    r = subprocess.run([sys.executable, MAKE_CLICKS, str(d), "--examples", "20000", "--test-examples", "4000",
                        "--seed", "3"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return d


def test_trains_the_dlrm_and_reports_each_epoch(clicks, tmp_path):
    out = tmp_path / "runs.jsonl"
    r = peer("--train", clicks / "train.tsv", "--test", clicks / "test.tsv", "--rows", 4096, "--batch", 128,
             "--epochs", 2, "--json", out)
    assert r.returncode == 0, r.stderr
    assert "20000 train, 4000 test examples" in r.stdout
    rec = json.loads(out.read_text().splitlines()[-1])
    assert [e["epoch"] for e in rec["epochs"]] == [1, 2]
    # It learns the planted teacher: better than chance, better in epoch 2.
    assert rec["epochs"][1]["test_auc"] > 0.6, rec
    assert rec["epochs"][1]["train_loss"] < rec["epochs"][0]["train_loss"], rec
    assert rec["epochs"][0]["samples_per_s"] > 0
    # The same seed, the same run.
    again = tmp_path / "again.jsonl"
    assert peer("--train", clicks / "train.tsv", "--test", clicks / "test.tsv", "--rows", 4096, "--batch", 128,
                "--epochs", 2, "--json", again).returncode == 0
    a = json.loads(again.read_text())
    assert [e["test_auc"] for e in a["epochs"]] == [e["test_auc"] for e in rec["epochs"]]


def test_a_malformed_line_and_a_missing_file_are_named(clicks, tmp_path):
    bad = tmp_path / "bad.tsv"
    lines = (clicks / "train.tsv").read_text().splitlines()[:300]
    lines[211] = "\t".join(lines[211].split("\t")[:30])
    bad.write_text("\n".join(lines) + "\n")
    r = peer("--train", bad, "--test", clicks / "test.tsv", "--rows", 64)
    assert r.returncode != 0
    assert f"{bad}:212: 30 fields, expected 40" in r.stderr and "Traceback" not in r.stderr
    r = peer("--train", tmp_path / "none.tsv", "--test", clicks / "test.tsv")
    assert r.returncode != 0 and "none.tsv: no such file" in r.stderr
    r = peer("--train", clicks / "train.tsv", "--test", clicks / "test.tsv", "--rows", 1)
    assert r.returncode != 0 and "--rows must be at least 2" in r.stderr
