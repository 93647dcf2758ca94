"""client/examples/torch_trainer.py under shardps-launch (2 servers, 2
workers, sync) reaches the C++ worker's MLP accuracy (same optimizer,
learning rate, batch and epochs) within 1 point."""
import os
import re
import subprocess

import pytest

from conftest import BUILD, SRC

pytest.importorskip("torch")
LAUNCH = os.path.join(SRC, "tools", "shardps-launch")


def final_accuracy(worker_cmd, tmp_path, name):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(BUILD, "client", "python"), os.path.join(SRC, "client", "python")])
    p = subprocess.run([LAUNCH, "--bin-dir", BUILD, "--run-dir", str(tmp_path / name), "--servers", "2",
                        "--workers", "2", "--consistency", "sync", "--timeout", "400", "--", *worker_cmd],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=450)
    assert p.returncode == 0, p.stdout
    acc = re.findall(r"worker 0 \| epoch 2 done .* test accuracy (\d+\.\d+)%", p.stdout)
    assert acc, p.stdout
    return float(acc[-1])


def test_torch_trainer_reaches_the_cpp_workers_accuracy(tmp_path):
    torch_acc = final_accuracy(["/usr/bin/python3", os.path.join(SRC, "client", "examples", "torch_trainer.py"),
                                "--coordinator", "{coordinator}", "--rank", "{rank}", "--epochs", "2",
                                "--optimizer", "sgd", "--lr", "0.1"], tmp_path, "torch")
    cpp_acc = final_accuracy([os.path.join(BUILD, "worker", "shardps-worker"), "--coordinator", "{coordinator}",
                              "--rank", "{rank}", "--model", "mlp", "--hidden", "256,128", "--epochs", "2",
                              "--optimizer", "sgd", "--lr", "0.1", "--batch", "64"], tmp_path, "cpp")
    assert abs(torch_acc - cpp_acc) <= 1.0, f"torch {torch_acc}% vs C++ {cpp_acc}%"
