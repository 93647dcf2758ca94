"""shardps.torch.Embedding / EmbeddingBag against torch.nn.Embedding /
EmbeddingBag holding the same rows, and the embedding-table options of
Client.create_table, on real local clusters."""
import json
import os
import re
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import shardps  # noqa: E402
import shardps.torch  # noqa: E402

# Ids far apart (no fixed size), repeated within the batch.
IDS = torch.tensor([[3, 1 << 40, 3, 7], [7, 7, 12345678901, 3], [0, 3, 1 << 40, 5]])


def reference(emb, ids, cls=torch.nn.Embedding, **kw):
    """A torch module holding the servers' rows of every id in `ids`, and
    the ids renumbered into it."""
    uniq, inverse = torch.unique(ids, sorted=True, return_inverse=True)
    ref = cls(len(uniq), emb.embedding_dim, **kw)
    with torch.no_grad():
        ref.weight.copy_(emb.read(uniq))
    return ref, uniq, inverse


def loss_of(out, seed=1):
    """A loss whose gradient differs per position (and is not linear)."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(out.shape, generator=g)
    return (out * t).sum() + (out ** 2).sum()


def train_step(ps, module, loss):
    loss.backward()
    assert module.step() >= 1  # the pushes backward sent, waited for: before the clock
    ps.clock()


@pytest.fixture
def ps(cluster_factory):
    c = cluster_factory(servers=2, workers=1, consistency="sync")
    with shardps.connect(c.endpoint, rank=0) as client:
        yield client


def test_embedding_equals_torch_embedding_forward_and_after_sgd(ps):
    emb = shardps.torch.Embedding(None, 4, name="e", client=ps, init="uniform", low=-0.05, high=0.05, optimizer="sgd",
                                  lr=1.0)
    ref, uniq, inverse = reference(emb, IDS)
    assert float(ref.weight.abs().max()) <= 0.05 and float(ref.weight.std()) > 0
    out = emb(IDS)
    assert out.shape == (3, 4, 4) and out.dtype == torch.float32
    np.testing.assert_array_equal(out.detach().numpy(), ref(inverse).detach().numpy())
    opt = torch.optim.SGD(ref.parameters(), lr=1.0)
    loss_of(ref(inverse)).backward()
    opt.step()
    train_step(ps, emb, loss_of(out))
    # Id 3 is in the batch 4 times, 7 three times: their steps are the sums of their gradients.
    np.testing.assert_allclose(emb.read(uniq).numpy(), ref.weight.detach().numpy(), rtol=0, atol=1e-6)


def test_embedding_adagrad_two_steps_equal_torch_adagrad(ps):
    emb = shardps.torch.Embedding(None, 3, name="e", client=ps, init="normal", stddev=0.1, optimizer="adagrad", lr=0.1,
                                  eps=1e-8, initial_accumulator=0.0)
    second = torch.tensor([[3, 3, 99], [1 << 40, 42, 42]])  # overlaps the first batch: accumulators carry on
    everything = torch.cat([IDS.flatten(), second.flatten()])
    ref, uniq, _ = reference(emb, everything)
    opt = torch.optim.Adagrad(ref.parameters(), lr=0.1, eps=1e-8, initial_accumulator_value=0.0)
    for seed, ids in ((1, IDS), (2, second)):
        local = torch.searchsorted(uniq, ids)  # the ids renumbered into ref
        out = emb(ids)
        np.testing.assert_allclose(out.detach().numpy(), ref(local).detach().numpy(), rtol=0, atol=1e-6)
        opt.zero_grad()
        loss_of(ref(local), seed).backward()
        opt.step()
        train_step(ps, emb, loss_of(out, seed))
    np.testing.assert_allclose(emb.read(uniq).numpy(), ref.weight.detach().numpy(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("mode,shape", [(m, s) for m in ("sum", "mean", "max") for s in ("offsets", "2d")] +
                         [("sum", "weights")])  # per_sample_weights: mode sum only
def test_embedding_bag_equals_torch_embedding_bag(ps, mode, shape):
    bag = shardps.torch.EmbeddingBag(None, 5, name=f"b_{mode}_{shape}", client=ps, mode=mode, init="uniform", low=-0.05,
                                     high=0.05, optimizer="sgd", lr=1.0)
    if shape == "2d":
        ids, offsets = IDS, None
    else:
        ids, offsets = IDS.flatten(), torch.tensor([0, 3, 3, 8])  # bag 1 is empty
    weights = torch.linspace(0.5, 2.0, ids.numel()).reshape(ids.shape) if shape == "weights" else None
    ref, uniq, inverse = reference(bag, ids, torch.nn.EmbeddingBag, mode=mode)
    out = bag(ids, offsets, per_sample_weights=weights)
    want = ref(inverse, offsets, per_sample_weights=weights)
    assert out.shape == want.shape
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-7)
    opt = torch.optim.SGD(ref.parameters(), lr=1.0)
    loss_of(want).backward()
    opt.step()
    train_step(ps, bag, loss_of(out))
    np.testing.assert_allclose(bag.read(uniq).numpy(), ref.weight.detach().numpy(), rtol=0, atol=1e-6)


def test_unpushed_ids_read_their_initial_values_and_pulls_push_nothing(ps):
    emb = shardps.torch.Embedding(None, 2, name="c", client=ps, init="constant", value=0.25, optimizer="sgd", lr=1.0)
    np.testing.assert_array_equal(emb(torch.tensor([9, 1 << 50])).detach().numpy(), np.full((2, 2), 0.25, np.float32))
    assert emb.step() == 0  # no backward: nothing was pushed
    with torch.no_grad():
        emb(torch.tensor([9]))
    assert emb.step() == 0
    u = shardps.torch.Embedding(None, 8, name="u", client=ps, init="uniform", low=-0.05, high=0.05, seed=4)
    before = u.read(torch.tensor([77, 78]))
    train_step(ps, u, u(torch.tensor([5, 6, 5])).sum())  # other ids pushed and changed
    after = u.read(torch.tensor([77, 78]))
    np.testing.assert_array_equal(before.numpy(), after.numpy())
    assert float(after.abs().max()) <= 0.05 and not torch.equal(after[0], after[1])
    assert torch.all(u.read(torch.tensor([5])) != u.read(torch.tensor([6])))


def test_empty_batch(ps):
    emb = shardps.torch.Embedding(None, 3, name="e", client=ps)
    assert emb(torch.zeros(0, 4, dtype=torch.long)).shape == (0, 4, 3)
    bag = shardps.torch.EmbeddingBag(None, 3, name="b", client=ps, mode="sum")
    np.testing.assert_array_equal(bag(torch.zeros(0, dtype=torch.long), torch.tensor([0, 0])).detach().numpy(),
                                  np.zeros((2, 3), np.float32))


def test_bad_inputs_raise_clear_errors(ps):
    emb = shardps.torch.Embedding(100, 4, name="e", client=ps)
    with pytest.raises(IndexError, match=r"Embedding 'e': id -1 is negative"):
        emb(torch.tensor([1, -1]))
    with pytest.raises(IndexError, match=r"id 100 is out of range: num_embeddings is 100"):
        emb(torch.tensor([[99, 100]]))
    with pytest.raises(TypeError, match=r"ids must be int64 \(or int32\), got torch.float32"):
        emb(torch.tensor([1.0]))
    with pytest.raises(TypeError, match=r"must be a torch.Tensor .* got ndarray"):
        emb(np.array([1]))
    assert emb(torch.tensor([1, 99], dtype=torch.int32)).shape == (2, 4)
    bag = shardps.torch.EmbeddingBag(None, 4, name="b", client=ps, mode="mean")
    with pytest.raises(ValueError, match="input must be 1-d .* got 3 dimensions"):
        bag(torch.zeros(2, 2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="a 1-d input needs offsets"):
        bag(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="offsets must be None for a 2-d input"):
        bag(torch.tensor([[1, 2]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="offsets must be a 1-d int64"):
        bag(torch.tensor([1, 2]), torch.tensor([0.0]))
    with pytest.raises(ValueError, match="per_sample_weights is for mode 'sum' only"):
        bag(torch.tensor([[1, 2]]), per_sample_weights=torch.ones(1, 2))
    bsum = shardps.torch.EmbeddingBag(None, 4, name="s", client=ps, mode="sum")
    with pytest.raises(ValueError, match=r"per_sample_weights must be a floating tensor of the input's shape \(1, 2\)"):
        bsum(torch.tensor([[1, 2]]), per_sample_weights=torch.ones(2))
    with pytest.raises(ValueError, match="mode must be one of sum, mean, max"):
        shardps.torch.EmbeddingBag(None, 4, name="x", client=ps, mode="median")
    with pytest.raises(ValueError, match="dim must be an integer >= 1"):
        shardps.torch.Embedding(None, 0, name="x", client=ps)
    with pytest.raises(ValueError, match="num_embeddings must be an integer >= 1"):
        shardps.torch.Embedding(-5, 2, name="x", client=ps)
    with pytest.raises(ValueError, match="dtype must be one of f32, bf16, f16, got 'f64'"):
        shardps.torch.Embedding(None, 2, name="x", client=ps, dtype="f64")


def test_create_table_embedding_options(ps):
    t = ps.create_table("bf", kind="sparse", cols=8, dtype="bf16", admit_after=3, evict_after_clocks=10)
    assert t.dtype == "bf16" and "bf16" in repr(t)
    assert repr(t.spec) == ("TableSpec(name='bf', kind=sparse, cols=8, init=zeros, optimizer=sgd, lr=0.01, "
                            "dtype=bf16, admit_after=3, evict_after_clocks=10)")
    assert repr(ps.create_table("ad", rows=3, cols=2, init="uniform", low=-0.05, high=0.05, optimizer="adagrad",
                                lr=0.05).spec) == \
        ("TableSpec(name='ad', kind=dense, rows=3, cols=2, init=uniform(-0.05, 0.05), optimizer=adagrad, lr=0.05, "
         "eps=1e-08, initial_accumulator=0)")
    assert (t.spec.dtype, t.spec.admit_after, t.spec.evict_after_clocks, t.spec.evict_after_sec) == \
        (shardps._ext.DType.bf16, 3, 10, 0)
    assert ps.create_table("h", kind="sparse", cols=8, dtype="f16", evict_after_sec=60).spec.evict_after_sec == 60
    assert ps.create_table("d", rows=2, cols=2).dtype == "f32"
    for bad, match in (({"dtype": "float32"}, "dtype must be one of f32, bf16, f16"),
                       ({"admit_after": -1}, r"admit_after must be an integer in \[0, 4294967295\], got -1"),
                       ({"admit_after": 1.5}, "admit_after must be an integer"),
                       ({"evict_after_sec": True}, "evict_after_sec must be an integer"),
                       ({"evict_after_clocks": 1 << 32}, "evict_after_clocks must be an integer")):
        with pytest.raises(ValueError, match=match):
            ps.create_table("x", kind="sparse", cols=2, **bad)
    for bad, match in (({"admit_after": 256}, "admit_after must be at most 255"),
                       ({"evict_after_clocks": 5, "evict_after_sec": 5}, "give one of them"),
                       ({"kind": "dense", "rows": 4, "dtype": "bf16"}, "are for sparse tables")):
        with pytest.raises(shardps.InvalidArgumentError, match=match):
            ps.create_table("x", **{"kind": "sparse", "cols": 2, **bad})
    with pytest.raises(shardps.ConflictError):  # the same name with another dtype
        ps.create_table("bf", kind="sparse", cols=8, dtype="f16", admit_after=3, evict_after_clocks=10)


def test_a_tiered_table_from_python_and_torch(ps):
    t = ps.create_table("cold", kind="sparse", cols=4, cold_tier=True)
    assert t.spec.cold_tier and repr(t.spec).endswith("cold_tier=True)")
    with pytest.raises(TypeError, match="cold_tier must be True or False"):
        ps.create_table("x", kind="sparse", cols=2, cold_tier="yes")
    with pytest.raises(shardps.InvalidArgumentError, match="cold_tier is for sparse tables"):
        ps.create_table("x", rows=4, cols=2, cold_tier=True)
    emb = shardps.torch.Embedding(None, 4, name="cold_t", client=ps, init="zeros", optimizer="sgd", lr=1.0,
                                  cold_tier=True)
    ids = torch.tensor([1, 2, 1 << 40])
    train_step(ps, emb, emb(ids).sum())
    assert torch.equal(emb.read(ids), -torch.ones(3, 4))  # (rows in memory or not: the same values)


def test_a_16_bit_table_takes_and_gives_float32_arrays(ps):
    t = ps.create_table("b16", kind="sparse", cols=4, dtype="bf16", init="constant", value=1.0, optimizer="sgd",
                        lr=1.0)
    ids = np.array([5, 9], np.uint64)
    ps.push(t, np.full((2, 4), 1.0 / 3.0, np.float32), ids=ids)
    ps.clock()  # (sync: applied when the clock completes)
    got = ps.pull(t, ids=ids)
    assert got.dtype == np.float32 and got.shape == (2, 4)
    np.testing.assert_allclose(got, np.full((2, 4), 2.0 / 3.0), atol=1.0 / 128)  # bf16: 8 significant bits


def test_admit_after_drops_the_first_pushes(ps):
    emb = shardps.torch.Embedding(None, 2, name="a", client=ps, init="zeros", optimizer="sgd", lr=1.0, admit_after=2)
    ids = torch.tensor([5])
    train_step(ps, emb, emb(ids).sum())  # the 1st push of id 5: dropped, no row
    np.testing.assert_array_equal(emb.read(ids).numpy(), [[0, 0]])
    train_step(ps, emb, emb(ids).sum())  # the 2nd: admitted, applied
    np.testing.assert_array_equal(emb.read(ids).numpy(), [[-1, -1]])


def test_evicted_rows_read_their_initial_values_again(ps):
    emb = shardps.torch.Embedding(None, 2, name="v", client=ps, init="constant", value=0.5, optimizer="sgd", lr=1.0,
                                  evict_after_clocks=2)
    ids = torch.tensor([11])
    train_step(ps, emb, emb(ids).sum())
    np.testing.assert_array_equal(emb.read(ids).numpy(), [[-0.5, -0.5]])
    deadline = time.monotonic() + 20
    while emb.read(ids)[0, 0] != 0.5:  # idle for more than 2 clocks: swept away between requests
        assert time.monotonic() < deadline, "the idle row was not evicted"
        ps.clock()
        time.sleep(0.01)


def test_bsp_with_sharded_model_equals_one_process_with_the_combined_batch(cluster_factory):
    """Two workers (threads), sync: a model with a dense layer (ShardedModel)
    and a shardps EmbeddingBag; ShardedModel.step() waits for the
    embedding's pushes before the clock. Equals one torch process training
    on both batches at once."""
    torch.set_num_threads(1)
    c = cluster_factory(servers=2, workers=2, consistency="sync")
    steps, batch, lr = 4, 8, 0.5
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, 20, (steps, 2, batch, 3), generator=g)
    ys = torch.randn(steps, 2, batch, generator=g)

    class Net(torch.nn.Module):
        def __init__(self, bag):
            super().__init__()
            self.bag, self.head = bag, torch.nn.Linear(4, 1)

        def forward(self, x):
            return self.head(torch.relu(self.bag(x))).squeeze(1)

    final, start = {}, {}

    def worker(rank):
        with shardps.connect(c.endpoint, rank=rank) as ps:
            bag = shardps.torch.EmbeddingBag(None, 4, name="bag", client=ps, mode="mean", init="uniform", low=-0.5,
                                             high=0.5, optimizer="sgd", lr=lr)
            net = Net(bag)
            sm = shardps.torch.ShardedModel(ps, net, optimizer="sgd", lr=lr, seed=3)
            assert sm.embeddings == [bag] and [n for n, _ in net.named_parameters()] == ["head.weight", "head.bias"]
            sm.pull()
            if rank == 0:
                start["head"] = {k: v.clone() for k, v in net.head.state_dict().items()}
                start["rows"] = bag.read(torch.arange(20))
            for s in range(steps):
                torch.nn.functional.mse_loss(net(ids[s, rank]), ys[s, rank]).backward()
                sm.step()
                assert bag.wait() == 0  # step() waited for the embedding's pushes
            final[rank] = (bag.read(torch.arange(20)), {k: v.clone() for k, v in net.head.state_dict().items()})

    threads = [threading.Thread(target=worker, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert set(final) == {0, 1}, "a worker did not finish"

    ref_bag = torch.nn.EmbeddingBag(20, 4, mode="mean")
    with torch.no_grad():
        ref_bag.weight.copy_(start["rows"])
    ref = Net(ref_bag)
    ref.head.load_state_dict(start["head"])
    opt = torch.optim.SGD(ref.parameters(), lr=lr)
    for s in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(ref(torch.cat([ids[s, 0], ids[s, 1]])), torch.cat([ys[s, 0], ys[s, 1]])).backward()
        opt.step()
    np.testing.assert_allclose(final[0][0].numpy(), ref_bag.weight.detach().numpy(), rtol=0, atol=1e-6)
    for k, v in ref.head.state_dict().items():
        np.testing.assert_allclose(final[0][1][k].numpy(), v.numpy(), rtol=0, atol=1e-6, err_msg=k)
    np.testing.assert_array_equal(final[0][0].numpy(), final[1][0].numpy())


def collection_batch():
    """Three features over two tables: 'a' and 'b' share table t1 (2-d ids
    and ids with offsets, bag 1 of 'b' empty), 'c' alone in t2."""
    return {"a": IDS, "b": (torch.tensor([3, 99, 1 << 40, 3, 8]), torch.tensor([0, 2, 2])),
            "c": torch.tensor([[5, 6], [6, 6], [1 << 33, 5]])}


@pytest.mark.parametrize("pooling", ["sum", "mean", "max"])
def test_collection_equals_one_torch_embedding_bag_per_feature(ps, pooling):
    EBC, Config = shardps.torch.EmbeddingBagCollection, shardps.torch.EmbeddingBagConfig
    opts = dict(init="uniform", low=-0.05, high=0.05, optimizer="sgd", lr=1.0)
    ebc = EBC(ps, [Config("t1", 4, feature_names=["a", "b"], pooling=pooling, **opts),
                   Config("t2", 3, feature_names=["c"], pooling="sum", **opts)])
    feats = collection_batch()
    weights = {"c": torch.tensor([[0.5, 2.0], [1.0, -1.0], [3.0, 0.25]])}  # 'sum' tables only
    # The reference: one torch.nn.EmbeddingBag per table, holding its rows.
    refs, local = {}, {}
    for name, fs, mode in (("t1", ["a", "b"], pooling), ("t2", ["c"], "sum")):
        ids = torch.cat([(feats[f][0] if isinstance(feats[f], tuple) else feats[f]).flatten() for f in fs])
        uniq = torch.unique(ids, sorted=True)
        ref = torch.nn.EmbeddingBag(len(uniq), ebc.read(name, uniq).shape[-1], mode=mode)
        with torch.no_grad():
            ref.weight.copy_(ebc.read(name, uniq))
        refs[name] = (ref, uniq)
        for f in fs:
            ids_f, offsets = feats[f] if isinstance(feats[f], tuple) else (feats[f], None)
            local[f] = (ref, torch.searchsorted(uniq, ids_f), offsets)
    out = ebc(feats, per_sample_weights=weights)
    want = {f: ref(ids, offsets, per_sample_weights=weights.get(f)) for f, (ref, ids, offsets) in local.items()}
    assert list(out) == ["a", "b", "c"]
    for f in out:
        assert out[f].shape == want[f].shape == (3, 4 if f != "c" else 3)
        np.testing.assert_allclose(out[f].detach().numpy(), want[f].detach().numpy(), rtol=1e-6, atol=1e-7)
    opt = torch.optim.SGD([r.weight for r, _ in refs.values()], lr=1.0)
    loss_of(torch.cat([want[f] for f in want], 1)).backward()
    opt.step()
    loss = loss_of(torch.cat([out[f] for f in out], 1))
    loss.backward()
    assert ebc.step() == 2  # one push per table, sent together
    ps.clock()
    for name, (ref, uniq) in refs.items():
        np.testing.assert_allclose(ebc.read(name, uniq).numpy(), ref.weight.detach().numpy(), rtol=0, atol=1e-6)


def test_collection_outputs_stacked_concat_and_from_a_keyed_jagged_tensor(ps):
    EBC, Config = shardps.torch.EmbeddingBagCollection, shardps.torch.EmbeddingBagConfig
    tables = [Config("u", 4, feature_names=["a", "c"], init="uniform", low=-1, high=1, seed=3),
              Config("v", 4, feature_names=["b"], init="uniform", low=-1, high=1, seed=4)]
    by_dict = EBC(ps, tables)
    stacked = EBC(ps, tables, output="stacked")
    concat = EBC(ps, tables, output="concat")
    feats = collection_batch()
    with torch.no_grad():
        d = by_dict(feats)
        s, c = stacked(feats), concat(feats)
    assert s.shape == (3, 3, 4) and c.shape == (3, 12)
    order = ["a", "c", "b"]  # tables' order, then each table's feature_names
    np.testing.assert_array_equal(s.numpy(), torch.stack([d[f] for f in order], 1).numpy())
    np.testing.assert_array_equal(c.numpy(), torch.cat([d[f] for f in order], 1).numpy())

    class KJT:  # TorchRec's KeyedJaggedTensor, as far as the collection reads it
        def __init__(self, keys, values, offsets):
            self._k, self._v, self._o = keys, values, offsets

        def keys(self):
            return self._k

        def values(self):
            return self._v

        def offsets(self):
            return self._o
    # The same batch as one jagged tensor: per key, 3 bags.
    values, offsets = [], [0]
    for f in ("a", "b", "c"):
        v = feats[f]
        ids, offs = v if isinstance(v, tuple) else (v.flatten(), torch.arange(0, v.numel(), v.shape[1]))
        ends = torch.cat([offs[1:], torch.tensor([ids.numel()])])
        for lo, hi in zip(offs.tolist(), ends.tolist()):
            offsets.append(offsets[-1] + hi - lo)
        values.append(ids)
    with torch.no_grad():
        k = by_dict(KJT(["a", "b", "c"], torch.cat(values), torch.tensor(offsets)))
    for f in d:
        np.testing.assert_array_equal(k[f].numpy(), d[f].numpy())


def test_collection_refuses_bad_tables_and_features(ps):
    EBC, Config = shardps.torch.EmbeddingBagCollection, shardps.torch.EmbeddingBagConfig
    with pytest.raises(ValueError, match="pooling must be one of sum, mean, max, got 'median'"):
        Config("t", 4, pooling="median")
    with pytest.raises(ValueError, match="a feature is in more than one table"):
        EBC(ps, [Config("t", 4, feature_names=["a"]), Config("u", 4, feature_names=["a"])])
    with pytest.raises(ValueError, match="output='stacked' needs every table's embedding_dim equal"):
        EBC(ps, [Config("t", 4), Config("u", 8)], output="stacked")
    ebc = EBC(ps, [Config("t", 4, feature_names=["a", "b"], num_embeddings=100)])
    with pytest.raises(KeyError, match=r"missing: \['b'\]; not in any table: \['z'\]"):
        ebc({"a": IDS % 100, "z": IDS})
    with pytest.raises(IndexError, match="table 't': id 1099511627776 is out of range: num_embeddings is 100"):
        ebc({"a": IDS, "b": IDS % 100})
    with pytest.raises(ValueError, match="every feature needs the same number of bags"):
        ebc({"a": IDS % 100, "b": IDS[:2] % 100})
    with pytest.raises(ValueError, match="feature 'b': a 1-d input needs offsets"):
        ebc({"a": IDS % 100, "b": IDS.flatten() % 100})
    with pytest.raises(ValueError, match=r"per_sample_weights: feature 'a' is pooled by 'mean'"):
        EBC(ps, [Config("m", 4, feature_names=["a"], pooling="mean")])({"a": IDS}, {"a": torch.ones(3, 4)})


def test_collection_sends_one_request_per_server_each_way(cluster_factory):
    # Three tables, every server holding rows of each: the forward's pulls
    # and the backward's pushes leave as one message per server each (the
    # servers count the messages they take: their closing log line).
    c = cluster_factory(servers=2, workers=1, consistency="sync")
    Config = shardps.torch.EmbeddingBagConfig
    with shardps.connect(c.endpoint, rank=0) as ps:
        ebc = shardps.torch.EmbeddingBagCollection(ps, [Config(f"t{i}", 4, optimizer="sgd", lr=0.1)
                                                        for i in range(3)])
        ids = torch.arange(64).reshape(8, 8)  # 64 ids: both servers hold some of each table
        out = ebc({f"t{i}": ids for i in range(3)})
        sum(o.sum() for o in out.values()).backward()
        assert ebc.step() == 3
    c.close()
    for s in range(2):
        log = open(f"{c.dir}/server{s}.log").read()
        # 3 pulls, 3 pushes; the messages: the worker's Join at connect,
        # then one for the pulls and one for the pushes.
        assert "6 pushes, pulls and ticks in 3 messages" in log, log


def pipelined_job(c, pipelined, steps=4, in_hold=True):
    """A model with an EmbeddingBag, an Embedding and a collection (two
    features) under a Linear head, `steps` sync steps; with `pipelined`,
    each batch's rows are prefetched in the previous step
    (ShardedModel.step(ahead=...)). Returns the final rows, the dense
    parameters, and the messages each server took."""
    Config = shardps.torch.EmbeddingBagConfig
    opts = dict(init="uniform", low=-0.5, high=0.5, optimizer="adagrad", lr=0.1)
    g = torch.Generator().manual_seed(7)
    batches = [{"a": torch.randint(0, 40, (6, 3), generator=g), "b": torch.randint(0, 40, (6, 2), generator=g),
                "c1": torch.randint(0, 40, (6, 2), generator=g), "c2": torch.randint(0, 40, (6, 4), generator=g)}
               for _ in range(steps)]
    with shardps.connect(c.endpoint, rank=0) as ps:
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = shardps.torch.EmbeddingBag(None, 4, name="a", client=ps, mode="sum", **opts)
                self.b = shardps.torch.Embedding(None, 4, name="b", client=ps, **opts)
                self.ebc = shardps.torch.EmbeddingBagCollection(ps, [Config("c", 4, feature_names=["c1", "c2"],
                                                                            pooling="mean", **opts)])
                self.head = torch.nn.Linear(16, 1)

            def forward(self, x):
                c = self.ebc({"c1": x["c1"], "c2": x["c2"]})
                return self.head(torch.cat([self.a(x["a"]), self.b(x["b"]).sum(1), c["c1"], c["c2"]], 1))

            def prefetch(self, x):
                self.a.prefetch(x["a"])
                self.b.prefetch(x["b"])
                self.ebc.prefetch({"c1": x["c1"], "c2": x["c2"]})

        net = Net()
        sm = shardps.torch.ShardedModel(ps, net, optimizer="adagrad", lr=0.1, init="torch")
        sm.pull()
        if pipelined:
            with ps.hold_requests():
                net.prefetch(batches[0])
        for i, x in enumerate(batches):
            loss = (net(x) - 1.0).pow(2).mean()
            with ps.hold_requests():
                loss.backward()
            nxt = batches[i + 1] if i + 1 < steps else None
            sm.step(ahead=(lambda: net.prefetch(nxt)) if pipelined and nxt is not None else None,
                    ahead_in_hold=in_hold)
        everything = torch.arange(40)
        rows = [net.a.read(everything), net.b.read(everything), net.ebc.read("c", everything)]
        dense = [p.detach().clone() for p in net.parameters()]
    c.close()
    messages = [int(re.search(r"in (\d+) messages", open(f"{c.dir}/server{s}.log").read()).group(1)) for s in range(2)]
    return rows, dense, messages


def test_the_pipelined_step_equals_the_unpipelined_one_bit_for_bit_under_sync(cluster_factory):
    rows, dense, plain_messages = pipelined_job(cluster_factory(servers=2, workers=1, consistency="sync"), False)
    rows_p, dense_p, piped_messages = pipelined_job(cluster_factory(servers=2, workers=1, consistency="sync"), True)
    for r, rp in zip(rows + dense, rows_p + dense_p):
        assert torch.equal(r, rp)
    assert float(rows[0].std()) > 0 and not torch.equal(dense[0], torch.zeros_like(dense[0]))
    # The prefetched rows rode with the tick: each step takes 2 messages a
    # server (backward's pushes; the tick, the dense pulls and the next rows)
    # instead of 5 (3 embedding pulls besides).
    assert all(p < u for p, u in zip(piped_messages, plain_messages)), (piped_messages, plain_messages)
    print("messages per server, unpipelined / pipelined:", plain_messages, piped_messages)
    # The next rows requested once the tick left (ahead_in_hold=False, for
    # an `ahead` that waits itself): the same model; their own message a
    # step (or the tick's, where the I/O thread had not sent it yet).
    rows_a, dense_a, after_messages = pipelined_job(cluster_factory(servers=2, workers=1, consistency="sync"), True,
                                                    in_hold=False)
    for r, ra in zip(rows + dense, rows_a + dense_a):
        assert torch.equal(r, ra)
    assert all(p <= a < u for p, a, u in zip(piped_messages, after_messages, plain_messages)), (
        piped_messages, after_messages, plain_messages)


def test_a_prefetch_of_other_ids_is_dropped_and_the_forward_pulls_its_own(ps):
    emb = shardps.torch.Embedding(None, 3, name="e", client=ps, init="uniform", low=-1, high=1)
    emb.prefetch(torch.tensor([1, 2, 3]))
    ids = torch.tensor([[4, 5], [5, 1]])
    np.testing.assert_array_equal(emb(ids).detach().numpy(), emb.read(ids).numpy())
    with pytest.raises(IndexError, match="is negative"):
        emb.prefetch(torch.tensor([-1]))


def test_torchs_argument_order_the_client_given_once_and_names_of_its_own(ps):
    # torch.nn.Embedding's order, (num_embeddings, embedding_dim); the client
    # set once for the process; a table named after its kind and number.
    shardps.torch.set_client(ps)
    try:
        a = shardps.torch.Embedding(1000, 16)
        b = shardps.torch.EmbeddingBag(50, 8, mode="sum", sparse=True)
        c = shardps.torch.Embedding(None, 4, name="mine")
        assert (a.num_embeddings, a.embedding_dim) == (1000, 16)
        assert (b.num_embeddings, b.embedding_dim, b.mode) == (50, 8, "sum")
        assert a.table.name.startswith("embedding.") and b.table.name.startswith("embedding_bag.") and \
            c.table.name == "mine"
        assert a.table.cols == 16 and b.table.cols == 8
        with pytest.raises(IndexError, match="out of range: num_embeddings is 1000"):
            a(torch.tensor([1000]))
        assert b(torch.tensor([[1, 2]])).shape == (1, 8)
    finally:
        shardps.torch.set_client(None)
    with pytest.raises(ValueError, match=r"no client: give client=ps, or call shardps.torch.set_client\(ps\)"):
        shardps.torch.Embedding(10, 4)
    with pytest.raises(ValueError, match=r"padding_idx=0 is not supported"):
        shardps.torch.Embedding(10, 4, client=ps, padding_idx=0)
    with pytest.raises(TypeError, match="takes 2 positional arguments, got 3"):
        shardps.torch.EmbeddingBag(10, 4, "sum", client=ps)


def test_the_old_argument_order_still_works_and_says_how_it_was_read(ps):
    # Embedding(client, name, dim, num_embeddings): what the new user
    # wrote as Embedding(ps, "e", 1000, 16) meaning torch's order is read as
    # dim 1000 -- said in the warning, with the call to write instead.
    with pytest.warns(DeprecationWarning, match=r"read as name='old', dim=1000, num_embeddings=16\); write it as "
                                                r"torch's, Embedding\(16, 1000, name='old', client=...\)"):
        e = shardps.torch.Embedding(ps, "old", 1000, 16)
    assert (e.embedding_dim, e.num_embeddings, e.table.cols) == (1000, 16, 1000)
    with pytest.warns(DeprecationWarning):
        bag = shardps.torch.EmbeddingBag(ps, "oldbag", dim=4, mode="max")
    assert (bag.embedding_dim, bag.num_embeddings, bag.mode) == (4, None, "max")


def train_beside_torch(net, sm, opt, batches, want_of, rtol, atol):
    """Steps `net` (through `sm`, each next batch prefetched in the step
    before: net.prefetch) and a torch reference (`want_of(batch)`, its
    optimizer `opt`) on the same batches and loss, their forwards equal
    (rtol, atol) at every step."""
    for i, x in enumerate(batches):
        out = net(x)
        want = want_of(x)
        np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=rtol, atol=atol)
        opt.zero_grad()
        loss_of(want, i).backward()
        opt.step()
        loss_of(out, i).backward()
        nxt = batches[i + 1] if i + 1 < len(batches) else None
        sm.step(ahead=None if nxt is None else (lambda b=nxt: net.prefetch(b)))


def test_modules_of_a_group_share_one_table_and_one_request_each_way(cluster_factory):
    # Three per-feature modules in one group: one sparse table (keys slot <<
    # 48 | id), each module's rows its own; forward and an SGD step equal
    # torch's on the same rows; the step sends the group's gradients as one
    # push and its prefetches as one pull per server.
    c = cluster_factory(servers=2, workers=1, consistency="sync")
    opts = dict(group="feats", init="uniform", low=-0.05, high=0.05, optimizer="sgd", lr=1.0)
    batches = [{"a": IDS % 50, "b": (IDS * 7) % 50, "c": IDS[:, :2] % 50},
               {"a": IDS % 40, "b": (IDS * 3) % 50, "c": IDS[:, 1:3] % 50}]
    with shardps.connect(c.endpoint, rank=0) as ps:
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = shardps.torch.EmbeddingBag(50, 4, client=ps, mode="sum", **opts)
                self.b = shardps.torch.EmbeddingBag(50, 4, client=ps, mode="mean", **opts)
                self.c = shardps.torch.Embedding(50, 4, client=ps, **opts)

            def forward(self, x):
                return torch.cat([self.a(x["a"]), self.b(x["b"]), self.c(x["c"]).sum(1)], 1)

            def prefetch(self, x):
                self.a.prefetch(x["a"])
                self.b.prefetch(x["b"])
                self.c.prefetch(x["c"])

        net = Net()
        assert net.a.table.name == net.b.table.name == net.c.table.name == "feats"
        sm = shardps.torch.ShardedModel(ps, net)
        assert sm.groups and len(sm.groups) == 1
        everything = torch.arange(50)
        # The reference: torch modules holding each module's rows.
        refs = {k: getattr(net, k).read(everything) for k in "abc"}
        assert not torch.equal(refs["a"], refs["b"])  # each module its own rows
        ref = {"a": torch.nn.EmbeddingBag(50, 4, mode="sum"), "b": torch.nn.EmbeddingBag(50, 4, mode="mean"),
               "c": torch.nn.Embedding(50, 4)}
        with torch.no_grad():
            for k, m in ref.items():
                m.weight.copy_(refs[k])
        opt = torch.optim.SGD([m.weight for m in ref.values()], lr=1.0)
        with ps.hold_requests():
            net.prefetch(batches[0])
        train_beside_torch(net, sm, opt, batches, lambda x: torch.cat(
            [ref["a"](x["a"]), ref["b"](x["b"]), ref["c"](x["c"]).sum(1)], 1), rtol=1e-6, atol=1e-7)
        for k in "abc":
            np.testing.assert_allclose(getattr(net, k).read(everything).numpy(), ref[k].weight.detach().numpy(),
                                       rtol=0, atol=1e-6)
    c.close()
    for s in range(2):
        log = open(f"{c.dir}/server{s}.log").read()
        # 2 steps: 2 pulls (the group's, prefetched), 2 pushes, 2 ticks, and the 3 reads before and after.
        assert re.search(r"\b12 pushes, pulls and ticks in", log), log


def test_a_group_refuses_modules_of_other_table_options(ps):
    shardps.torch.EmbeddingBag(10, 4, client=ps, group="g", optimizer="adagrad", lr=0.1)
    with pytest.raises(ValueError, match=r"group 'g': .* same table options; this one differs in cols, lr"):
        shardps.torch.EmbeddingBag(10, 8, client=ps, group="g", optimizer="adagrad", lr=0.2)
    e = shardps.torch.Embedding(None, 4, client=ps, group="g", optimizer="adagrad", lr=0.1)
    with pytest.raises(IndexError, match=r"is over 2\^48, the most in group 'g'"):
        e(torch.tensor([1 << 48]))


def test_pretrained_rows_the_weight_and_frozen_modules(ps):
    w = torch.randn(20, 4, generator=torch.Generator().manual_seed(3))
    emb = shardps.torch.Embedding.from_pretrained(w, client=ps, name="pre", optimizer="sgd", lr=1.0)
    assert (emb.num_embeddings, emb.embedding_dim) == (20, 4)
    assert torch.equal(emb.weight, w)
    ids = torch.tensor([[0, 19, 3], [3, 3, 7]])
    np.testing.assert_array_equal(emb(ids).detach().numpy(), torch.nn.functional.embedding(ids, w).numpy())
    # Frozen (torch's default): no gradient flows into its rows, as torch's.
    assert not emb(ids).requires_grad and emb.wait() == 0
    # Not frozen: it trains from the given rows; `weight =` writes rows and
    # restarts their optimizer state.
    bag = shardps.torch.EmbeddingBag.from_pretrained(w, freeze=False, client=ps, name="pre_bag", mode="sum",
                                                     optimizer="sgd", lr=1.0)
    bag(torch.tensor([[1, 2]])).sum().backward()
    assert bag.wait() == 1
    ps.clock()
    want = w.clone()
    want[1:3] -= 1.0
    np.testing.assert_allclose(bag.weight.numpy(), want.numpy(), rtol=0, atol=1e-6)
    bag.weight = w[:5] * 2
    np.testing.assert_allclose(bag.weight[:5].numpy(), (w[:5] * 2).numpy(), rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"the rows must be \(n, 4\), got \(3, 5\)"):
        bag.weight = torch.zeros(3, 5)
    with pytest.raises(ValueError, match="21 rows, more than num_embeddings 20"):
        bag.load_weight(torch.zeros(21, 4))
    hashed = shardps.torch.Embedding(None, 4, client=ps, name="hashed")
    with pytest.raises(ValueError, match="weight needs num_embeddings .* snapshots"):
        hashed.weight
    assert "weight" not in hashed.state_dict()
    with pytest.raises(shardps.InvalidArgumentError, match="an id appears twice"):
        ps.assign(hashed.table, np.zeros((2, 4), np.float32), ids=np.array([5, 5], np.uint64))


def checkpoint_model(ps):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = shardps.torch.EmbeddingBag(50, 4, client=ps, name="ck_emb", mode="mean", optimizer="adagrad",
                                                  lr=0.1, init="uniform", low=-0.1, high=0.1)
            self.head = torch.nn.Linear(4, 1)

        def forward(self, x):
            return self.head(self.emb(x)).squeeze(1)
    net = Net()
    return net, shardps.torch.ShardedModel(ps, net, optimizer="adagrad", lr=0.1, init="torch")


def test_a_checkpoint_loads_onto_another_number_of_servers_and_into_plain_torch(cluster_factory):
    ids = torch.tensor([[1, 2, 3], [4, 5, 49]])
    with shardps.connect(cluster_factory(servers=2, workers=1, consistency="sync").endpoint, rank=0) as ps:
        net, sm = checkpoint_model(ps)
        sm.pull()
        for _ in range(2):
            net(ids).pow(2).mean().backward()
            sm.step()
        saved = sm.state_dict()
        assert set(saved) == {"emb.weight", "head.weight", "head.bias"} and saved["emb.weight"].shape == (50, 4)
        with torch.no_grad():
            out = net(ids)
    with shardps.connect(cluster_factory(servers=3, workers=1, consistency="sync").endpoint, rank=0) as ps:
        net2, sm2 = checkpoint_model(ps)
        sm2.load_state_dict(saved)
        sm2.pull()
        for k, v in sm2.state_dict().items():
            assert torch.equal(v, saved[k]), k
        with torch.no_grad():
            assert torch.equal(net2(ids), out)
    # A small table's rows load into a plain torch module (export for inference).
    plain = torch.nn.EmbeddingBag(50, 4, mode="mean")
    plain.load_state_dict({"weight": saved["emb.weight"]})
    head = torch.nn.Linear(4, 1)
    head.load_state_dict({"weight": saved["head.weight"], "bias": saved["head.bias"]})
    with torch.no_grad():
        np.testing.assert_allclose(head(plain(ids)).squeeze(1).numpy(), out.numpy(), rtol=1e-6, atol=1e-7)


def checkpoint_collection(ps):
    Config = shardps.torch.EmbeddingBagConfig
    return shardps.torch.EmbeddingBagCollection(ps, [
        Config("ck_user", 4, num_embeddings=30, feature_names=["u"], optimizer="adagrad", lr=0.1,
               init="uniform", low=-0.1, high=0.1),
        Config("ck_item", 3, num_embeddings=40, feature_names=["i", "j"], pooling="mean", optimizer="adagrad",
               lr=0.1, init="uniform", low=-0.1, high=0.1),
        Config("ck_hashed", 2, feature_names=["h"])])  # no num_embeddings: its rows are in the snapshots


def test_a_collections_rows_checkpoint_onto_another_number_of_servers_and_into_plain_torch(cluster_factory):
    feats = {"u": torch.tensor([[1, 29], [3, 3]]), "i": torch.tensor([[0, 39], [7, 8]]), "j": torch.tensor([[5], [6]]),
             "h": torch.tensor([[1 << 40], [12]])}
    with shardps.connect(cluster_factory(servers=2, workers=1, consistency="sync").endpoint, rank=0) as ps:
        ebc = checkpoint_collection(ps)
        for _ in range(2):
            sum(o.pow(2).sum() for o in ebc(feats).values()).backward()
            ebc.step()
            ps.clock()
        saved = ebc.state_dict()
        # TorchRec's keys; a hashed table has no row list.
        assert set(saved) == {"embedding_bags.ck_user.weight", "embedding_bags.ck_item.weight"}
        assert saved["embedding_bags.ck_item.weight"].shape == (40, 3)
        np.testing.assert_array_equal(saved["embedding_bags.ck_user.weight"][[1, 29, 3]].numpy(),
                                      ebc.read("ck_user", torch.tensor([1, 29, 3])).numpy())
        with torch.no_grad():
            out = ebc(feats)
    with shardps.connect(cluster_factory(servers=3, workers=1, consistency="sync").endpoint, rank=0) as ps:
        ebc2 = checkpoint_collection(ps)
        with pytest.raises(RuntimeError, match=r"Missing key\(s\).*embedding_bags.ck_item.weight"):
            ebc2.load_state_dict({"embedding_bags.ck_user.weight": saved["embedding_bags.ck_user.weight"]})
        with pytest.raises(RuntimeError, match=r"Unexpected key\(s\).*embedding_bags.nope.weight"):
            ebc2.load_state_dict(dict(saved, **{"embedding_bags.nope.weight": torch.zeros(1, 1)}))
        with pytest.raises(RuntimeError, match=r"table 'ck_item': 41 rows, more than num_embeddings 40"):
            ebc2.load_state_dict(dict(saved, **{"embedding_bags.ck_item.weight": torch.zeros(41, 3)}))
        ebc2.load_state_dict(saved)
        for k, v in ebc2.state_dict().items():
            assert torch.equal(v, saved[k]), k
        with torch.no_grad():
            out2 = ebc2(feats)
        for f in ("u", "i", "j"):
            assert torch.equal(out2[f], out[f]), f
    # Each table's rows load into a plain torch.nn.EmbeddingBag (export for inference).
    plain = torch.nn.EmbeddingBag(40, 3, mode="mean")
    plain.load_state_dict({"weight": saved["embedding_bags.ck_item.weight"]})
    with torch.no_grad():
        np.testing.assert_allclose(plain(feats["i"]).numpy(), out["i"].numpy(), rtol=1e-6, atol=1e-7)


def test_a_checkpoint_streamed_to_disk_loads_onto_another_job_and_into_plain_torch(cluster_factory, tmp_path):
    """shardps.torch.save writes the rows a few at a time (chunk_rows=7 here)
    into one .npy per entry; load maps them; the same model comes back on 3
    servers (saved from 2), bit for bit, and plain torch takes the files."""
    ids = torch.tensor([[1, 2, 3], [4, 5, 49]])
    feats = {"u": torch.tensor([[1, 29], [3, 3]]), "i": torch.tensor([[0, 39], [7, 8]]), "j": torch.tensor([[5], [6]]),
             "h": torch.tensor([[1 << 40], [12]])}
    ck = str(tmp_path / "ck")
    with shardps.connect(cluster_factory(servers=2, workers=1, consistency="sync").endpoint, rank=0) as ps:
        net, sm = checkpoint_model(ps)
        net.ebc = checkpoint_collection(ps)
        sm.pull()
        for _ in range(2):
            (net(ids).pow(2).mean() + sum(o.pow(2).sum() for o in net.ebc(feats).values())).backward()
            net.ebc.step()
            sm.step()
        want = sm.state_dict()
        os.makedirs(ck)  # an earlier checkpoint there is replaced
        assert shardps.torch.save(sm, ck, chunk_rows=7) == len(want) == 5
    got = shardps.torch.load(ck)
    assert list(got) == list(want)
    for k in want:
        assert torch.equal(got[k], want[k]), k
    with open(os.path.join(ck, "index.json")) as f:
        assert [e["file"] for e in json.load(f)["entries"]] == [f"{i:05d}.npy" for i in range(5)]
    with shardps.connect(cluster_factory(servers=3, workers=1, consistency="sync").endpoint, rank=0) as ps:
        net2, sm2 = checkpoint_model(ps)
        net2.ebc = checkpoint_collection(ps)
        sm2.load_state_dict(shardps.torch.load(ck))
        for k, v in sm2.state_dict().items():
            assert torch.equal(v, want[k]), k
    plain = torch.nn.EmbeddingBag(50, 4, mode="mean")
    plain.load_state_dict({"weight": got["emb.weight"]})
    assert torch.equal(plain.weight.detach(), want["emb.weight"])
    # A damaged or missing checkpoint says which file.
    with pytest.raises(FileNotFoundError, match="no checkpoint directory"):
        shardps.torch.load(str(tmp_path / "none"))
    with open(os.path.join(ck, "00002.npy"), "r+b") as f:
        f.truncate(100)
    with pytest.raises(ValueError, match=r"entry 'head.bias': cannot read .*00002.npy|entry 'head.bias': .*00002.npy holds"):
        shardps.torch.load(ck)
    os.remove(os.path.join(ck, "index.json"))
    with pytest.raises(FileNotFoundError, match="has no index.json"):
        shardps.torch.load(ck)
    with pytest.raises(TypeError, match="a ShardedModel or a torch.nn.Module, got dict"):
        shardps.torch.save({}, ck)


def test_a_group_of_per_feature_bags_pools_in_one_call_as_torch_does(cluster_factory):
    # The Wide & Deep shape: one EmbeddingBag per feature (mode sum, a bag per
    # row of a (b, 1) column of the batch), all in one group, prefetched in
    # the step before: the batch's modules are pooled in one call, and
    # forward and several Adagrad steps equal torch's modules on the same rows.
    # One module of the group is prefetched but not forwarded: its rows
    # get no push (a zero gradient would still move a row whose optimizer
    # state is not zero, as Adam's or momentum's): the push's keys leave out
    # its slot.
    c = cluster_factory(servers=2, workers=1, consistency="sync")
    feats, rows = 5, 30
    gen = torch.Generator().manual_seed(7)
    batches = [torch.randint(0, rows, (16, feats), generator=gen) for _ in range(4)]
    with shardps.connect(c.endpoint, rank=0) as ps:
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bags = torch.nn.ModuleList([shardps.torch.EmbeddingBag(
                    rows, 3, client=ps, mode="sum", group="cols", init="uniform", low=-0.5, high=0.5,
                    optimizer="adagrad", lr=0.3) for _ in range(feats + 1)])  # the last one: never forwarded

            def forward(self, ids):
                return torch.cat([self.bags[f](ids[:, f:f + 1]) for f in range(feats)], 1)

            def prefetch(self, ids):
                for f in range(feats + 1):
                    self.bags[f].prefetch(ids[:, f % feats:f % feats + 1])

        net = Net()
        sm = shardps.torch.ShardedModel(ps, net)
        everything = torch.arange(rows)
        ref = [torch.nn.EmbeddingBag(rows, 3, mode="sum") for _ in range(feats + 1)]
        with torch.no_grad():
            for r, m in zip(ref, net.bags):
                r.weight.copy_(m.read(everything))
        opt = torch.optim.Adagrad([m.weight for m in ref], lr=0.3, eps=1e-10)
        with ps.hold_requests():
            net.prefetch(batches[0])
        train_beside_torch(net, sm, opt, batches, lambda ids: torch.cat(
            [ref[f](ids[:, f:f + 1]) for f in range(feats)], 1), rtol=0, atol=1e-5)
        for r, m in zip(ref, net.bags):
            np.testing.assert_allclose(m.read(everything).numpy(), r.weight.detach().numpy(), rtol=0, atol=1e-5)
        # The keys a batch's backward pushes: slots 0 .. feats - 1, never the
        # prefetched module's that was not forwarded (slot feats).
        group = net.bags[0]._group
        net.prefetch(batches[0])
        net(batches[0]).sum().backward()
        keys, grads = group.pushes[-1]
        assert sorted(set((keys >> 48).tolist())) == list(range(feats)), keys
        assert grads.shape == (len(keys), 3)
        sm.step()
    c.close()


def test_a_group_batch_with_an_id_out_of_range_is_refused_and_the_others_pull_their_own(ps):
    a = shardps.torch.EmbeddingBag(10, 4, client=ps, group="r", mode="sum")
    b = shardps.torch.EmbeddingBag(5, 4, client=ps, group="r", mode="sum")
    a.prefetch(torch.tensor([[1], [9]]))
    b.prefetch(torch.tensor([[7]]))
    with pytest.raises(IndexError, match=r"EmbeddingBag 'r': id 7 is out of range: num_embeddings is 5"):
        b(torch.tensor([[7]]))
    # a's prefetch went with the refused batch: its forward pulls its own rows.
    assert a(torch.tensor([[1], [9]])).shape == (2, 4)
    b.prefetch(torch.tensor([[-1]]))
    with pytest.raises(IndexError, match=r"EmbeddingBag 'r': id -1 is negative"):
        b(torch.tensor([[-1]]))


def test_a_prefetch_of_inference_tensors_and_of_ids_changed_in_place(ps):
    # Ids made under torch.inference_mode (no version counter) prefetch and
    # forward as any others; ids changed in place after their prefetch are
    # pulled again (the prefetched rows were another batch's).
    emb = shardps.torch.Embedding(None, 3, name="inf", client=ps, init="uniform", low=-1, high=1)
    bag = shardps.torch.EmbeddingBag(None, 3, group="inf_g", client=ps, mode="sum", init="uniform", low=-1, high=1)
    with torch.inference_mode():
        ids = torch.tensor([[1, 2], [2, 5]])
        emb.prefetch(ids)
        bag.prefetch(ids)
        want_e, want_b = emb.read(ids), bag.read(ids).sum(1)
        assert torch.equal(emb(ids), want_e) and torch.equal(bag(ids), want_b)
    ids = torch.tensor([[1, 2], [2, 5]])
    emb.prefetch(ids)
    bag.prefetch(ids)
    ids[0, 0] = 7
    with torch.no_grad():
        assert torch.equal(emb(ids), emb.read(ids))
        assert torch.equal(bag(ids), bag.read(ids).sum(1))
