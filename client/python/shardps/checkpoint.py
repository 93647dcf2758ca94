"""A model's state_dict on disk, streamed: shardps.torch.save / load.

    shardps.torch.save(sm, "/data/ckpt")          # a ShardedModel or any module holding shardps modules
    sm.load_state_dict(shardps.torch.load("/data/ckpt"))   # onto a job of any number of servers
    plain.load_state_dict(shardps.torch.load("/data/ckpt"))  # or into plain torch modules

A checkpoint is a directory: one NumPy .npy file per state_dict entry and
an index (index.json: the entries' keys, files, shapes and dtypes, in the
state_dict's order). The rows of the shardps embeddings (modules with
num_embeddings, an EmbeddingBagCollection's tables with num_embeddings)
are read from the servers and written CHUNK_ROWS rows at a time, and
load() maps every file instead of reading it (np.load's mmap, copy on
write), so a table larger than the process's memory is saved and loaded
in pieces: load_state_dict writes the rows onto the servers a piece at a
time (Client.assign). The directory is written under a temporary name and
renamed into place: a save that fails leaves an earlier checkpoint there
as it was.
"""

import json
import os
import shutil

import numpy as np
import torch

FORMAT = "shardps.torch checkpoint"
VERSION = 1


def _streams(module):
    """The module's state_dict entries as (key, kind, what): kind "rows"
    (what: (read(ids), rows, dim): read from the servers in pieces) or
    "tensor" (what: the tensor), in the state_dict's order."""
    from shardps.torch import EmbeddingBagCollection, _SparseLookup
    for name, m in module.named_modules():
        prefix = name + "." if name else ""
        if isinstance(m, _SparseLookup):
            if m.num_embeddings is not None:
                yield prefix + "weight", "rows", (m.read, m.num_embeddings, m.embedding_dim)
        elif isinstance(m, EmbeddingBagCollection):
            for c in m.configs:
                if c.num_embeddings is not None:
                    yield (f"{prefix}embedding_bags.{c.name}.weight", "rows",
                           (lambda ids, n=c.name, ebc=m: ebc.read(n, ids), c.num_embeddings, c.embedding_dim))
        else:
            own = {}
            m._save_to_state_dict(own, prefix, False)  # its own parameters and buffers, not its children's
            for k, v in own.items():
                yield k, "tensor", v


def save(obj, path, chunk_rows=None):
    """Writes the state_dict of `obj` -- a ShardedModel (its dense
    parameters pulled first, as its state_dict() does) or a torch module
    holding shardps embeddings -- into directory `path` (replaced once the
    new one is complete). Returns the number of entries written."""
    from shardps.torch import ShardedModel, _SparseLookup
    if isinstance(obj, ShardedModel):
        obj.pull(predict=False)
        module = obj.module
    elif isinstance(obj, torch.nn.Module):
        module = obj
    else:
        raise TypeError(f"shardps.torch.save: a ShardedModel or a torch.nn.Module, got {type(obj).__name__}")
    chunk = chunk_rows or _SparseLookup.CHUNK_ROWS
    path = os.path.abspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        entries = []
        for i, (key, kind, what) in enumerate(_streams(module)):
            file = f"{i:05d}.npy"
            if kind == "rows":
                read, n, dim = what
                out = np.lib.format.open_memmap(os.path.join(tmp, file), mode="w+", dtype=np.float32, shape=(n, dim))
                for lo in range(0, n, chunk):
                    out[lo:min(lo + chunk, n)] = read(torch.arange(lo, min(lo + chunk, n))).numpy()
                out.flush()
                shape, dtype = (n, dim), "float32"
                del out
            else:
                t = what.detach().cpu()
                try:
                    a = t.numpy()
                except TypeError as e:  # bfloat16 and other dtypes NumPy has not
                    raise TypeError(f"shardps.torch.save: '{key}' is {t.dtype}, which a .npy file cannot hold") from e
                np.save(os.path.join(tmp, file), a)
                shape, dtype = list(a.shape), str(a.dtype)
            entries.append({"key": key, "file": file, "shape": list(shape), "dtype": dtype})
        with open(os.path.join(tmp, "index.json"), "w") as f:
            json.dump({"format": FORMAT, "version": VERSION, "entries": entries}, f, indent=1)
        old = f"{path}.old-{os.getpid()}"
        if os.path.exists(path):
            os.rename(path, old)
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
        return len(entries)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load(path):
    """The state_dict saved in directory `path`, each entry a tensor over
    its file's mapped pages (read as used, copied only where written):
    give it to load_state_dict of the model, a ShardedModel or plain torch
    modules. A missing or damaged checkpoint is an error naming the file."""
    index = os.path.join(path, "index.json")
    if not os.path.isdir(path):
        raise FileNotFoundError(f"shardps.torch.load: no checkpoint directory {path}")
    try:
        with open(index) as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"shardps.torch.load: {path} has no index.json: not a complete shardps.torch "
                                f"checkpoint") from None
    except ValueError as e:
        raise ValueError(f"shardps.torch.load: {index} is not valid JSON: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise ValueError(f"shardps.torch.load: {index} is not a {FORMAT} of version {VERSION}")
    out = {}
    for e in meta.get("entries", []):
        file = os.path.join(path, str(e.get("file", "")))
        try:
            a = np.load(file, mmap_mode="c", allow_pickle=False)
        except (OSError, ValueError) as err:
            raise ValueError(f"shardps.torch.load: entry '{e.get('key')}': cannot read {file}: {err}") from None
        if list(a.shape) != e.get("shape") or str(a.dtype) != e.get("dtype"):
            raise ValueError(f"shardps.torch.load: entry '{e.get('key')}': {file} holds {a.dtype} "
                             f"{list(a.shape)}, the index says {e.get('dtype')} {e.get('shape')}")
        out[e["key"]] = torch.from_numpy(a) if a.ndim else torch.tensor(a[()])
    return out
