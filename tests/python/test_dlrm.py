"""client/examples/torch_dlrm.py under shardps-launch (2 servers, 2 workers,
sync) on a small click log from tools/make-clicks: it trains and worker 0
reports the test AUC and logloss of every epoch."""
import os
import re
import subprocess
import sys

import pytest

from conftest import BUILD, SRC

pytest.importorskip("torch")


@pytest.mark.parametrize("pool", [False, True], ids=["shares", "work_pool"])
def test_torch_dlrm_reports_test_auc(tmp_path, pool):
    made = subprocess.run([sys.executable, os.path.join(SRC, "tools", "make-clicks"), str(tmp_path / "log"),
                           "--examples", "600", "--test-examples", "200"], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(BUILD, "client", "python"), os.path.join(SRC, "client", "python")])
    p = subprocess.run([os.path.join(SRC, "tools", "shardps-launch"), "--bin-dir", BUILD, "--run-dir",
                        str(tmp_path / "run"), "--servers", "2", "--workers", "2", "--consistency", "sync",
                        "--timeout", "200", "--", "/usr/bin/python3",
                        os.path.join(SRC, "client", "examples", "torch_dlrm.py"), "--coordinator", "{coordinator}",
                        "--rank", "{rank}", "--train-tsv", str(tmp_path / "log" / "train.tsv"),
                        "--test-tsv", str(tmp_path / "log" / "test.tsv"), "--rows", "4096", "--batch", "32",
                        "--epochs", "2", "--chunk-batches", "3"] + (["--work-pool"] if pool else []),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=260)
    assert p.returncode == 0, p.stdout
    # 600 examples, 2 workers of 32: 9 steps each per epoch (chunks of 3 x 2 batches: a partial last one).
    assert re.search(r"worker 1 \| torch dlrm \| 600 train examples, 9 steps of 32", p.stdout), p.stdout
    aucs = re.findall(r"worker 0 \| epoch (\d) \| .* \| test AUC (0\.\d{4}) \| logloss (\d\.\d{4})", p.stdout)
    assert [e for e, _, _ in aucs] == ["1", "2"], p.stdout
    for _, auc, logloss in aucs:
        assert 0 < float(auc) < 1 and 0 < float(logloss) < 2, p.stdout
    assert len(re.findall(r"worker 1 \| epoch \d \| .* train loss \d", p.stdout)) == 2, p.stdout
    if pool:  # the pool's batches: every example of each epoch, once, between the two workers
        trained = [int(n) for n in re.findall(r"worker \d \| finished \| (\d+) examples", p.stdout)]
        assert sum(trained) == 2 * 600, p.stdout


def test_wide_and_deep_one_module_per_feature_trains_alone_and_through_shardps(tmp_path):
    # client/examples/torch_widedeep.py: 52 per-feature EmbeddingBags, the
    # same model alone (--local, torch.optim.Adagrad) and through shardps.
    made = subprocess.run([sys.executable, os.path.join(SRC, "tools", "make-clicks"), str(tmp_path / "log"),
                           "--examples", "3000", "--test-examples", "500", "--seed", "4"], capture_output=True,
                          text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(BUILD, "client", "python"), os.path.join(SRC, "client", "python")])
    example = os.path.join(SRC, "client", "examples", "torch_widedeep.py")
    data = ["--train-tsv", str(tmp_path / "log" / "train.tsv"), "--test-tsv", str(tmp_path / "log" / "test.tsv"),
            "--rows", "512", "--epochs", "2"]
    alone = subprocess.run(["/usr/bin/python3", example, "--local", "--batch", "64", *data], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=env, timeout=200)
    assert alone.returncode == 0, alone.stdout
    p = subprocess.run([os.path.join(SRC, "tools", "shardps-launch"), "--bin-dir", BUILD, "--run-dir",
                        str(tmp_path / "run"), "--servers", "2", "--workers", "2", "--consistency", "sync",
                        "--timeout", "200", "--", "/usr/bin/python3", example, "--coordinator", "{coordinator}",
                        "--rank", "{rank}", "--batch", "32", *data],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=260)
    assert p.returncode == 0, p.stdout
    for out, who in ((alone.stdout, r"one process"), (p.stdout, r"2 workers")):
        aucs = re.findall(rf"wide&deep \({who}\) \| epoch (\d) \| (\d+) steps .* test AUC (0\.\d{{4}})", out)
        assert [e for e, _, _ in aucs] == ["1", "2"] and all(s == "46" for _, s, _ in aucs), out
        # Planted teacher, 3000 examples: both learn something.
        assert float(aucs[-1][2]) > 0.55, out
