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
