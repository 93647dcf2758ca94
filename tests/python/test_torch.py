"""shardps.torch: BSP through Python equals one PyTorch process training on
the combined batch."""
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import shardps  # noqa: E402
import shardps.torch  # noqa: E402


def make_model():
    return torch.nn.Sequential(torch.nn.Linear(20, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def test_bsp_through_python_equals_one_process_with_the_combined_batch(cluster_factory):
    torch.set_num_threads(1)
    c = cluster_factory(servers=2, workers=2, consistency="sync")
    lr, steps, batch = 0.1, 6, 16
    g = torch.Generator().manual_seed(7)
    xs = torch.randn(steps, 2, batch, 20, generator=g)
    ys = torch.randint(0, 3, (steps, 2, batch), generator=g)
    loss_fn = torch.nn.CrossEntropyLoss()
    final = {}
    start = {}

    def worker(rank):
        model = make_model()
        with shardps.connect(c.endpoint, rank=rank) as ps:
            sm = shardps.torch.ShardedModel(ps, model, optimizer="sgd", lr=lr, seed=3)
            sm.pull()
            if rank == 0:
                start["state"] = {k: v.clone() for k, v in model.state_dict().items()}
            for s in range(steps):
                loss_fn(model(xs[s, rank]), ys[s, rank]).backward()
                sm.step()
            final[rank] = {k: v.clone() for k, v in model.state_dict().items()}

    threads = [threading.Thread(target=worker, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert set(final) == {0, 1}, "a worker did not finish"

    ref = make_model()
    ref.load_state_dict(start["state"])
    opt = torch.optim.SGD(ref.parameters(), lr=lr)
    for s in range(steps):
        opt.zero_grad()
        loss_fn(ref(torch.cat([xs[s, 0], xs[s, 1]])), torch.cat([ys[s, 0], ys[s, 1]])).backward()
        opt.step()
    for k, v in ref.state_dict().items():
        np.testing.assert_allclose(final[0][k].numpy(), v.numpy(), atol=1e-6, err_msg=k)
        np.testing.assert_array_equal(final[0][k].numpy(), final[1][k].numpy(), err_msg=k)


@pytest.mark.parametrize("prefetch", [False, True])
def test_prediction_moves_the_parameters_along_their_drift(cluster_factory, prefetch):
    """Async, two workers in one thread, interleaved so that each push of
    worker 1 misses worker 0's step: worker 1's pulls are extrapolated along
    the drift between its pulls, w + a (w - w_prev), a = K * tau / D with
    D = 2 updates between its pulls (worker 0's and its own): a = tau.
    `with pulled():` and pull(predict=False) give the values as pulled."""
    torch.set_num_threads(1)
    c = cluster_factory(servers=2, workers=2, consistency="async")
    g = torch.Generator().manual_seed(5)
    x = torch.randn(16, 20, generator=g)
    y = torch.randint(0, 3, (16,), generator=g)
    loss_fn = torch.nn.CrossEntropyLoss()
    with shardps.connect(c.endpoint, rank=0) as p0, shardps.connect(c.endpoint, rank=1) as p1:
        m0, m1 = make_model(), make_model()
        s0 = shardps.torch.ShardedModel(p0, m0, lr=0.1, seed=3, predict=2)
        s1 = shardps.torch.ShardedModel(p1, m1, lr=0.1, seed=3, predict=2, prefetch=prefetch)
        s0.pull()
        s1.pull()

        def as_pulled():  # what worker 1's last pull read (nothing was pushed since)
            return [p1.pull(t).reshape(p.shape) for t, p in zip(s1.tables, s1.params)]

        prev = as_pulled()
        for i in range(4):
            loss_fn(m0(x), y).backward()
            s0.step()  # lands between worker 1's pull and its push
            loss_fn(m1(x), y).backward()
            s1.step()  # 1 stale: its next parameters are predicted
            now = as_pulled()
            if i == 2:  # the values as pulled inside the block, the predicted ones after it
                with s1.pulled():
                    for p, w in zip(s1.params, now):
                        np.testing.assert_array_equal(p.detach().numpy(), w)
            assert 0 < s1._tau < 1
            for p, w, w_prev in zip(s1.params, now, prev):
                moved, drift = p.detach().numpy() - w, w - w_prev
                np.testing.assert_allclose(moved, s1._tau * drift, rtol=1e-3, atol=1e-6)
            prev = now
        s1.pull(predict=False)
        for p, w in zip(s1.params, as_pulled()):
            np.testing.assert_array_equal(p.detach().numpy(), w)


def test_prediction_is_off_under_sync(cluster_factory):
    c = cluster_factory(servers=1, workers=1, consistency="sync")
    with shardps.connect(c.endpoint, rank=0) as ps:
        assert shardps.torch.ShardedModel(ps, make_model(), predict=2).predict == 0.0
        for bad in (-1, float("inf"), float("nan")):
            with pytest.raises(ValueError, match=r"predict must be in \[0, 8\]"):
                shardps.torch.ShardedModel(ps, make_model(), prefix="b.", predict=bad)
        with pytest.raises(ValueError, match="compensate the same drift"):
            shardps.torch.ShardedModel(ps, make_model(), prefix="c.", predict=1, staleness_rule="dc")


def test_torch_init_follows_torchs_defaults(cluster_factory):
    """init="torch": Linear/Conv weights and biases uniform in +-1/sqrt(fan_in),
    an nn.Embedding N(0, 1), a norm layer's weight 1 and bias 0."""
    c = cluster_factory(servers=2, workers=1, consistency="async")
    model = torch.nn.Sequential(torch.nn.Conv1d(3, 4, 5), torch.nn.Flatten(), torch.nn.Linear(400, 300),
                                torch.nn.LayerNorm(300), torch.nn.Embedding(50, 60))
    with shardps.connect(c.endpoint, rank=0) as ps:
        sm = shardps.torch.ShardedModel(ps, model, init="torch", seed=2)
        sm.pull()
    for name, fan_in in (("0.weight", 15), ("0.bias", 15), ("2.weight", 400), ("2.bias", 400)):
        v = dict(model.named_parameters())[name].detach().numpy()
        bound = fan_in ** -0.5
        assert np.abs(v).max() <= bound and np.all(v != 0), name
        if v.size >= 60:  # uniform's spread and stddev, not a normal's
            assert np.abs(v).max() > 0.9 * bound and abs(v.std() - bound / 3 ** 0.5) < 0.15 * bound, name
    np.testing.assert_array_equal(model[3].weight.detach().numpy(), np.ones(300, np.float32))
    np.testing.assert_array_equal(model[3].bias.detach().numpy(), np.zeros(300, np.float32))
    e = model[4].weight.detach().numpy()
    assert abs(e.mean()) < 0.05 and abs(e.std() - 1) < 0.05


def test_worker_sampler_gives_each_worker_an_equal_disjoint_share(cluster_factory):
    c = cluster_factory(servers=1, workers=3, consistency="async")
    clients = [shardps.connect(c.endpoint, rank=r) for r in range(3)]
    try:
        dataset = torch.utils.data.TensorDataset(torch.arange(100))
        samplers = [shardps.torch.WorkerSampler(dataset, client=ps, seed=4) for ps in clients]
        shares = [list(s) for s in samplers]
        assert [len(s) for s in shares] == [33, 33, 33] and all(len(s) == 33 for s in samplers)
        flat = [i for s in shares for i in s]
        assert len(set(flat)) == 99 and set(flat) <= set(range(100))  # disjoint; the tail of 1 dropped
        assert shares == [list(s) for s in samplers]  # the same epoch, the same order
        for s in samplers:
            s.set_epoch(1)
        assert [list(s) for s in samplers] != shares
        # Without drop_last the first indices fill the last share; through a DataLoader.
        full = [shardps.torch.WorkerSampler(100, client=ps, shuffle=False, drop_last=False) for ps in clients]
        assert [list(s) for s in full] == [list(range(0, 100, 3)), list(range(1, 100, 3)) + [0],
                                           list(range(2, 100, 3)) + [1]]
        loader = torch.utils.data.DataLoader(dataset, batch_size=10, sampler=samplers[1])
        assert sum(len(b[0]) for b in loader) == 33
    finally:
        for ps in clients:
            ps.close()
    with pytest.raises(ValueError, match=r"no client: give client=ps, or call shardps.torch.set_client"):
        shardps.torch.WorkerSampler(10)


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.SGD(ps, lr=0.1),
    lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    lambda ps: torch.optim.Adagrad(ps, lr=0.1, initial_accumulator_value=0.1),
    lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.8, 0.99), eps=1e-6),
], ids=["sgd", "momentum", "adagrad", "adam"])
def test_the_users_optimizer_run_by_the_servers_trains_as_it_does_locally(cluster_factory, make_opt):
    """Only the optimizer line changes: the servers apply torch's update,
    so one worker ends where the same optimizer in one process ends."""
    import copy
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(5)
    xs, ys = torch.randn(8, 16, 20, generator=g), torch.randint(0, 3, (8, 16), generator=g)
    c = cluster_factory(servers=2, workers=1, consistency="sync")
    with shardps.connect(c.endpoint, rank=0) as ps:
        model = make_model()
        opt = shardps.torch.DistributedOptimizer(make_opt(model.parameters()), model, client=ps)
        local = copy.deepcopy(model)  # the servers' initial values, pulled
        local_opt = make_opt(local.parameters())
        for x, y in zip(xs, ys):
            for m, o in ((model, opt), (local, local_opt)):
                o.zero_grad()
                torch.nn.functional.cross_entropy(m(x), y).backward()
                o.step()
        for (n, a), b in zip(model.named_parameters(), local.parameters()):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=n)


def test_the_users_optimizer_is_refused_where_the_servers_cannot_run_it(cluster_factory):
    c = cluster_factory(servers=1, workers=1, consistency="sync")
    with shardps.connect(c.endpoint, rank=0) as ps:
        m = make_model()
        D = shardps.torch.DistributedOptimizer
        for opt, said in ((torch.optim.SGD(m.parameters(), lr=0.1, weight_decay=1e-4), "SGD with weight_decay=0.0001"),
                          (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, nesterov=True), "nesterov"),
                          (torch.optim.Adam(m.parameters(), amsgrad=True), "amsgrad"),
                          (torch.optim.Adagrad(m.parameters(), lr_decay=0.1), "lr_decay"),
                          (torch.optim.RMSprop(m.parameters()), "SGD, Adagrad and Adam, not RMSprop"),
                          (torch.optim.SGD([{"params": m[0].parameters(), "lr": 0.1},
                                            {"params": m[2].parameters(), "lr": 0.2}]), "differ in lr"),
                          (torch.optim.SGD(m[0].parameters(), lr=0.1), r"does not own the model's parameters \['2.weight'")):
            with pytest.raises(ValueError, match=said):
                D(opt, m, client=ps)
        with pytest.raises(TypeError, match="a torch.optim.Optimizer, got dict"):
            D({}, m, client=ps)
        opt = D(torch.optim.SGD(m.parameters(), lr=0.1), m, client=ps, prefix="ok.")
        opt.param_groups[0]["lr"] = 0.01  # an LR scheduler's doing
        with pytest.raises(ValueError, match="the learning rate changed"):
            opt.step()


def test_pairwise_dot_equals_torchs_interaction_and_its_gradient():
    # shardps.torch.pairwise_dot: DLRM's interaction in shardps-worker's
    # kernel; forward and backward as torch's bmm and triu index compute them.
    gen = torch.Generator().manual_seed(5)
    for b, n, d in ((64, 27, 16), (3, 2, 1), (5, 9, 7), (1, 1, 4)):
        v = torch.randn(b, n, d, generator=gen, dtype=torch.float64)
        iu = torch.triu_indices(n, n, 1)
        ref = v.clone().requires_grad_(True)
        want = torch.bmm(ref, ref.transpose(1, 2))[:, iu[0], iu[1]]
        got_v = v.float().requires_grad_(True)
        got = shardps.torch.pairwise_dot(got_v)
        assert got.shape == (b, n * (n - 1) // 2)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
        g = torch.randn(want.shape, generator=gen, dtype=torch.float64)
        (want * g).sum().backward()
        (got * g.float()).sum().backward()
        np.testing.assert_allclose(got_v.grad.numpy(), ref.grad.numpy(), rtol=1e-5, atol=1e-5)
    # A view that is not contiguous is taken as its values.
    v = torch.randn(4, 16, 6, generator=gen).transpose(1, 2)
    iu = torch.triu_indices(6, 6, 1)
    np.testing.assert_allclose(shardps.torch.pairwise_dot(v).numpy(),
                               torch.bmm(v, v.transpose(1, 2))[:, iu[0], iu[1]].numpy(), rtol=1e-5, atol=1e-5)
    for bad in (torch.zeros(4, 5), torch.zeros(2, 3, 4, dtype=torch.float64), [[[1.0]]]):
        with pytest.raises(ValueError, match=r"pairwise_dot: v must be a \(batch, n, dim\) float32 CPU tensor"):
            shardps.torch.pairwise_dot(bad)
