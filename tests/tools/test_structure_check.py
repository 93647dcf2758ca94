"""tools/structure-check: the layout's rules fail where they are broken (docs/architecture.md, "Layout").

Each test copies the real client/, common/, server/ and worker/ into a
temporary root, breaks one rule, and checks that structure-check exits 1
naming the place and the rule; the untouched copy passes.
"""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHECK = os.path.join(ROOT, "tools", "structure-check")


@pytest.fixture
def tree(tmp_path):
    if not (shutil.which("ctags-universal") or shutil.which("ctags")):
        pytest.skip("Universal Ctags is not installed (Debian: universal-ctags)")
    for d in ("client", "common", "server", "worker"):
        shutil.copytree(os.path.join(ROOT, d), tmp_path / d, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "tools").mkdir()  # (its Python classes are checked too: none here)
    return tmp_path


def check(root):
    return subprocess.run([sys.executable, CHECK, "--root", str(root)], capture_output=True, text=True, timeout=120)


def add_line(path, line, after="#pragma once\n"):
    text = path.read_text()
    i = text.index(after) + len(after) if after in text else 0
    path.write_text(text[:i] + line + "\n" + text[i:])


def test_the_tree_as_it_is_passes(tree):
    r = check(tree)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every rule and limit holds" in r.stdout


@pytest.mark.parametrize("path,include,rule", [
    ("client/call.h", "server/tables/table.h", "client/ may include"),            # the client includes server code
    ("common/codec/half.h", "client/call.h", "common/codec/ may include"),       # common includes the client
    ("worker/trainers/trainer.h", "client/io_thread.h", "worker/trainers/ may include"),  # a worker past the API
    ("server/tables/table.h", "server/snapshot/snapshot.h", "server/tables/ may include"),  # tables on snapshots
    ("server/server.h", "server/coordinator/coordinator.h", "server/ may include"),  # one program on the other
])
def test_a_bad_include_is_named_with_the_rule(tree, path, include, rule):
    add_line(tree / path, f'#include "{include}"')
    r = check(tree)
    assert r.returncode == 1, r.stdout
    bad = [l for l in r.stdout.splitlines() if l.startswith(path + ":")]
    assert len(bad) == 1, r.stdout
    assert f'includes "{include}": {rule}' in bad[0]


def test_a_bracketed_include_of_a_project_folder_counts_too(tree):
    add_line(tree / "server/tables/admission.h", "#include <server/snapshot/snapshot.h>")
    r = check(tree)
    assert r.returncode == 1
    assert 'server/tables/admission.h' in r.stdout and 'includes "server/snapshot/snapshot.h"' in r.stdout


def test_cpp_in_an_unchecked_top_level_folder(tree):
    (tree / "plugins").mkdir()
    (tree / "plugins/x.cc").write_text('#include "server/server.h"\n')
    r = check(tree)
    assert r.returncode == 1
    assert "plugins/: C++ outside client/, common/, server/ and worker/" in r.stdout


def test_a_socket_in_a_folder_without_sockets(tree):
    add_line(tree / "server/tables/admission.h", "inline void Listen(zmq::socket_t& s) {}", after="namespace shardps {\n")
    r = check(tree)
    assert r.returncode == 1
    assert "server/tables/admission.h" in r.stdout and "uses socket_t: server/tables/ holds no sockets" in r.stdout


def test_a_folder_without_a_rule(tree):
    (tree / "server/tiers").mkdir()
    (tree / "server/tiers/cold.h").write_text("#pragma once\n")
    r = check(tree)
    assert r.returncode == 1
    assert "server/tiers/: no include rule" in r.stdout


def test_a_folder_of_more_than_twenty_source_files(tree):
    folder = tree / "worker/devices"
    have = len([n for n in os.listdir(folder) if n.endswith((".cc", ".h", ".cu")) and "_test." not in n])
    for i in range(21 - have):
        (folder / f"extra_{i}.h").write_text("#pragma once\n")
    (folder / "more_test.cc").write_text("// tests aside\n")
    r = check(tree)
    assert r.returncode == 1
    assert "worker/devices/: 21 source files (a folder may hold 20, tests aside)" in r.stdout
