"""tools/make-clicks: a Criteo-format log from a planted teacher (docs/embeddings.md)."""
import json
import os
import subprocess
import sys

import pytest

MAKE_CLICKS = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "make-clicks")


def run(*args):
    return subprocess.run([sys.executable, MAKE_CLICKS, *map(str, args)], capture_output=True, text=True, timeout=300)


def lines(path):
    with open(path) as f:
        return f.read().split("\n")[:-1]


def test_writes_both_files_in_the_format_and_the_teachers_scores(tmp_path):
    r = run(tmp_path, "--examples", 3000, "--test-examples", 1000, "--seed", 5)
    assert r.returncode == 0, r.stderr
    assert "teacher: test AUC" in r.stdout
    train, test = lines(tmp_path / "train.tsv"), lines(tmp_path / "test.tsv")
    assert len(train) == 3000 and len(test) == 1000
    labels = 0
    for line in train + test:
        f = line.split("\t")
        assert len(f) == 40, line
        assert f[0] in ("0", "1")
        labels += f[0] == "1"
        for x in f[1:14]:
            assert x == "" or int(x) >= -3
        for c in f[14:]:
            assert c == "" or (len(c) == 8 and int(c, 16) >= 0)
    assert 0.15 < labels / 4000 < 0.35  # --ctr 0.25
    info = json.load(open(tmp_path / "teacher.json"))
    assert 0.6 < info["teacher_test_auc"] <= 1.0
    assert 0 < info["teacher_test_logloss"] < 0.69
    assert info["examples"] == 3000 and len(info["vocab"]) == 26


def test_the_same_seed_gives_the_same_log_and_another_seed_another(tmp_path):
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        assert run(tmp_path / name, "--examples", 500, "--test-examples", 100, "--seed", seed).returncode == 0
    a, b, c = (open(tmp_path / n / "train.tsv").read() for n in "abc")
    assert a == b and a != c


def test_drift_makes_the_ids_of_the_log_span_more_values(tmp_path):
    def distinct(d):
        ids = set()
        for line in lines(d / "train.tsv"):
            ids.update((i, c) for i, c in enumerate(line.split("\t")[14:]) if c)
        return len(ids)
    assert run(tmp_path / "still", "--examples", 4000, "--test-examples", 10, "--vocab-scale", 0.001).returncode == 0
    assert run(tmp_path / "drift", "--examples", 4000, "--test-examples", 10, "--vocab-scale", 0.001,
               "--drift", 5).returncode == 0
    assert distinct(tmp_path / "drift") > 1.5 * distinct(tmp_path / "still")


@pytest.mark.parametrize("args, words", [
    (["--examples", "0", "--test-examples", "5"], "--examples must be positive"),
    (["--examples", "5", "--test-examples", "5", "--ctr", "1.5"], "--ctr must be in (0, 1)"),
    (["--examples", "5"], "--test-examples"),
])
def test_bad_arguments_are_refused_with_a_message(tmp_path, args, words):
    r = run(tmp_path / "x", *args)
    assert r.returncode == 2
    assert words in r.stderr and "Traceback" not in r.stderr


def test_an_output_directory_that_cannot_be_made_is_named(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = run(blocker / "sub", "--examples", 5, "--test-examples", 5)
    assert r.returncode == 1
    assert "cannot create" in r.stderr and "Traceback" not in r.stderr
