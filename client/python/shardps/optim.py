"""The user's torch optimizer, run by the servers: shardps.torch.DistributedOptimizer.

    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)              # one process
    opt = shardps.torch.DistributedOptimizer(                           # through shardps: only this line
        torch.optim.Adagrad(model.parameters(), lr=0.05), model)
    for x, y in batches:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()                          # pushes the gradients, ends the clock, pulls the parameters

Horovod's and BytePS's convention (wrap the optimizer the model was written
with), in a parameter server's terms: the wrapped optimizer never steps
locally; its kind and hyperparameters become the servers' optimizer of the
model's tables (a ShardedModel: one table per parameter), and step() is
ShardedModel.step(). The servers' optimizers are torch's own updates:

    torch.optim.SGD      -> "sgd", or "momentum" with momentum > 0 (dampening 0, no nesterov)
    torch.optim.Adagrad  -> "adagrad" (lr, eps, initial_accumulator_value)
    torch.optim.Adam     -> "adam" (lr, betas, eps)

What they cannot run is refused, naming it: weight decay, lr_decay,
dampening, nesterov, amsgrad, maximize, parameter groups with different
settings, another optimizer class, parameters the optimizer does not own.
The learning rate is the table's from its creation: changing
param_groups[i]["lr"] (an LR scheduler) reaches no server, and step()
refuses to go on when it changed. shardps embeddings (Embedding,
EmbeddingBag, EmbeddingBagCollection) keep the optimizer of their own
constructors: they have no parameters, the optimizer does not see them.
"""

import torch


def _server_optimizer(opt):
    """(optimizer name, lr, other create_table arguments) for torch
    optimizer `opt`, or ValueError naming what the servers cannot run."""
    groups = opt.param_groups
    name = type(opt).__name__
    keys = set().union(*(g.keys() for g in groups)) - {"params"}
    differ = sorted(k for k in keys if len({repr(g.get(k)) for g in groups}) > 1)
    if differ:
        raise ValueError(f"DistributedOptimizer: the parameter groups of {name} differ in {', '.join(differ)}; "
                         f"the servers run one setting per model (one group, or groups with equal settings)")
    g = groups[0]

    def refuse_if(setting, bad):
        if bad:
            raise ValueError(f"DistributedOptimizer: {name} with {setting}={g.get(setting)!r}: the servers' "
                             f"{name} has no {setting} (leave it at its default)")
    refuse_if("weight_decay", g.get("weight_decay", 0) != 0)
    refuse_if("maximize", g.get("maximize", False))
    if isinstance(opt, torch.optim.SGD):
        refuse_if("dampening", g.get("dampening", 0) != 0)
        refuse_if("nesterov", g.get("nesterov", False))
        if g.get("momentum", 0) == 0:
            return "sgd", g["lr"], {}
        return "momentum", g["lr"], {"momentum": float(g["momentum"])}
    if isinstance(opt, torch.optim.Adagrad):
        refuse_if("lr_decay", g.get("lr_decay", 0) != 0)
        return "adagrad", g["lr"], {"eps": float(g["eps"]),
                                    "initial_accumulator": float(g.get("initial_accumulator_value", 0.0))}
    if type(opt) is torch.optim.Adam:
        refuse_if("amsgrad", g.get("amsgrad", False))
        b1, b2 = g["betas"]
        return "adam", g["lr"], {"beta1": float(b1), "beta2": float(b2), "eps": float(g["eps"])}
    raise ValueError(f"DistributedOptimizer: the servers run torch.optim.SGD, Adagrad and Adam, not {name}")


class DistributedOptimizer:
    """Wraps torch optimizer `optimizer` of `model`'s parameters (every
    trainable one, each once): the servers run it (module docstring). The
    model's tables are made and pulled here; `client` (default: the one of
    shardps.torch.set_client) and the other keyword arguments (init, seed,
    prefix, prefetch, predict, wire_dtype, compress, staleness_rule, ...)
    go to ShardedModel. Gradients are pushed by step(), all of them in one
    message per server (push_in_backward=False; True pushes each as backward
    makes it). `sharded` is the ShardedModel (its state_dict, pulled())."""

    def __init__(self, optimizer, model, client=None, push_in_backward=False, **sharded_model_args):
        from shardps.torch import ShardedModel, _the_client
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"DistributedOptimizer: a torch.optim.Optimizer, got {type(optimizer).__name__}")
        mine = {id(p) for g in optimizer.param_groups for p in g["params"]}
        trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        missing = [n for n, p in trained if id(p) not in mine]
        if missing:
            raise ValueError(f"DistributedOptimizer: the optimizer does not own the model's parameters {missing} "
                             f"(the servers train every trainable parameter of the model)")
        if len(mine) != len(trained):
            raise ValueError(f"DistributedOptimizer: the optimizer holds {len(mine) - len(trained)} parameters that "
                             f"are not the model's trainable ones")
        name, lr, args = _server_optimizer(optimizer)
        self.optimizer = optimizer
        self._lrs = [g["lr"] for g in optimizer.param_groups]
        self.sharded = ShardedModel(_the_client(client, "DistributedOptimizer"), model, optimizer=name, lr=lr,
                                    push_in_backward=push_in_backward, **args, **sharded_model_args)
        self.sharded.pull()

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None, ahead=None):
        """Pushes the gradients, ends the clock and pulls the parameters
        (ShardedModel.step; `ahead`: its next-batch prefetches). `closure`
        (torch's): called first, under grad, its loss returned."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        now = [g["lr"] for g in self.optimizer.param_groups]
        if now != self._lrs:
            raise ValueError(f"DistributedOptimizer: the learning rate changed ({self._lrs} -> {now}), and the "
                             f"servers' is the table's from its creation: an LR schedule does not reach them")
        self.sharded.step(ahead=ahead)
        return loss

    def state_dict(self):
        """The model's state_dict with the servers' values (the optimizer's
        own state is the servers': in the job's snapshots)."""
        return self.sharded.state_dict()

    def load_state_dict(self, state_dict):
        return self.sharded.load_state_dict(state_dict)
