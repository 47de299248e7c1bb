"""PyTorch on pstrain: an nn.Module's parameters live on the parameter servers, and their
optimizer runs there.

    ps_model = pstrain.torch.distribute(model, client, optimizer=pstrain.optim.Adam(lr=1e-3))
    for x, y in batches:
        ps_model.pull()                       # PS values -> the parameters' storage
        model.zero_grad()
        loss_fn(model(x), y).backward()
        ps_model.push(examples=len(y), loss=loss.item())   # p.grad of every parameter -> PS

Nothing here depends on the job's mode: sync, async and ssp behave as the client's pull and
push do (docs/semantics.md). `Embedding` is an nn.Module over a PS embedding table; its
gradient rows are pushed by the same `ps_model.push()`.
"""

import hashlib
import math
import warnings

import numpy as np
import torch
from torch import nn

from . import init as _init
from .checkpoint import Checkpoint, load_checkpoint
from .errors import FailedPreconditionError, InvalidArgumentError

__all__ = ["distribute", "DistributedModule", "Embedding", "default_initializer",
           "load_state_dict"]


def _seed(name):
    """A seed fixed by the name alone (the same in every process and run)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little") >> 1


def _fan_in(weight_shape):
    """PyTorch's fan-in of a weight: its dim 1 times its receptive field (dims 2 and on)."""
    return weight_shape[1] * math.prod(weight_shape[2:]) if len(weight_shape) >= 2 else 0


def default_initializer(module, param_name, shape, qualified_name):
    """The pstrain initializer drawing what PyTorch's own reset_parameters() draws for the
    parameter `param_name` of `module`, seeded by its qualified name.

    nn.Linear, nn.Conv*, nn.ConvTranspose* and nn.Bilinear: weight and bias uniform in
    +-1/sqrt(fan_in), fan_in from the weight (torch's kaiming_uniform(a=sqrt(5)) bound). Norm
    layers (BatchNorm, LayerNorm, GroupNorm, InstanceNorm): weight 1, bias 0. nn.Embedding:
    normal(0, 1). Any other parameter of 2 or more dims: uniform in +-1/sqrt(fan_in) of its own
    shape; of fewer dims: zeros.
    """
    seed = _seed(qualified_name)
    norms = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)
    if isinstance(module, norms):
        return _init.Constant(1.0) if param_name == "weight" else _init.Zeros()
    if isinstance(module, nn.Embedding):
        return _init.Normal(0.0, 1.0, seed=seed)
    weight = getattr(module, "weight", None)
    if isinstance(module, (nn.Linear, nn.modules.conv._ConvNd, nn.Bilinear)) and \
            isinstance(weight, torch.Tensor):
        fan_in = _fan_in(tuple(weight.shape))
    elif len(shape) >= 2:
        fan_in = _fan_in(shape)
    else:
        return _init.Zeros()
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return _init.Uniform(-bound, bound, seed=seed)


def _choose_initializer(initializer, module, param_name, shape, qualified_name):
    if initializer is None:
        return default_initializer(module, param_name, shape, qualified_name)
    if isinstance(initializer, dict):
        if qualified_name in initializer:
            return initializer[qualified_name]
        return default_initializer(module, param_name, shape, qualified_name)
    if isinstance(initializer, _init.Initializer):
        return initializer
    if callable(initializer):
        return initializer(qualified_name, shape)
    raise InvalidArgumentError("distribute(): initializer must be a pstrain.init object, a dict "
                               "or a callable, not %r" % (initializer,))


class DistributedModule:
    """What distribute() returns: the module, its PS variables and tables, pull() and push().

    Attributes: `module` (the nn.Module), `client`, `names` (the parameters' qualified names,
    in variable order), `global_step` (the client's: in sync mode the PS step last pulled).
    """

    def __init__(self, module, client, params, names, embeddings):
        self.module = module
        self.client = client
        self.names = names
        self._params = params
        self._embeddings = embeddings
        self._zeros = [None] * len(params)
        self._pulled = False

    @property
    def global_step(self):
        return self.client.global_step

    def pull(self):
        """Copies the PS values into the parameters' storage (param.data, in place: the tensors
        and their data pointers stay the same, so an optimizer or hook holding them still sees
        them). Blocks as the client's pull does (sync: until the step of this worker's last push
        is applied). The embedding tables are read by Embedding.forward, not here."""
        if self._params:
            values = self.client.pull()
            with torch.no_grad():
                for p, v in zip(self._params, values):
                    p.copy_(_as_tensor(v).view(p.shape))
        self._pulled = True

    def push(self, examples=0, loss=None):
        """Sends p.grad of every parameter (numpy views of the gradient tensors, no copy; a
        non-contiguous gradient is made contiguous first), then the gradient rows of every
        Embedding looked up since the last push. A parameter whose grad is None sends zeros
        (with SGD it does not move; an optimizer with momentum or Adam's state may still move
        it). `examples` and `loss` feed the chief's progress line. FailedPreconditionError
        before the first pull()."""
        if not self._pulled:
            raise FailedPreconditionError(
                "push() before pull(): pull the parameters first, so the push is tagged with "
                "the versions its gradient was computed from")
        if self._params:
            self.client.push(self._grads(), examples=examples, loss=loss)
            examples, loss = 0, None
        if self._embeddings:
            self._push_sparse(examples, loss)

    def _grads(self):
        grads = []
        for i, p in enumerate(self._params):
            g = p.grad
            if g is None:
                if self._zeros[i] is None:
                    self._zeros[i] = np.zeros(tuple(p.shape), dtype=np.float32)
                grads.append(self._zeros[i])
                continue
            if g.dtype != torch.float32 or g.is_sparse or g.device.type != "cpu":
                raise InvalidArgumentError(
                    "parameter %r: its grad is a %s %s tensor on %s; push() takes dense float32 "
                    "CPU gradients" % (self.names[i], "sparse" if g.is_sparse else "dense",
                                       g.dtype, g.device))
            grads.append(g.detach().contiguous().numpy())
        return grads

    def _push_sparse(self, examples, loss):
        dims = _table_dims(self.client)
        keys = [[] for _ in dims]
        grads = [[] for _ in dims]
        for emb in self._embeddings:
            k, g = emb._take_gradients()
            keys[emb.index].append(k)
            grads[emb.index].append(g)
        keys = [np.concatenate(k) if k else np.empty(0, dtype=np.uint64) for k in keys]
        grads = [np.concatenate(g) if g else np.empty((0, d), dtype=np.float32)
                 for g, d in zip(grads, dims)]
        self.client.push_sparse(keys, grads, examples=examples, loss=loss)


def _as_tensor(array):
    """A tensor viewing `array`, no copy. A read-only view (the client's buffer) is only read
    here, so torch's warning about non-writable arrays does not apply and is silenced."""
    if array.flags.writeable:
        return torch.from_numpy(array)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


def distribute(module, client, optimizer=None, initializer=None, partitioner=""):
    """Creates one PS variable per parameter of `module` (name: the parameter's qualified name,
    as in module.named_parameters(); shape: the parameter's) and returns a DistributedModule.

    Every worker calls it with the same module: creation is get-or-create, so the variables'
    initial values are those the chief drew for the first creator, and `optimizer` (a
    pstrain.optim object; None: the chief's) and `initializer` of later callers are ignored.
    `initializer`: None draws per parameter what PyTorch's default init draws for that layer
    (see default_initializer), so a PS-trained model starts as a torch one does; a pstrain.init
    object for every parameter; a dict {qualified name: initializer} (others get the default); or
    a callable (qualified name, shape) -> initializer. The module's current values are not sent:
    call pull() before the first forward. Embedding submodules are found and pushed with the
    parameters. The client must hold no variables that are not the module's.

    InvalidArgumentError for a parameter that is not a float32 CPU tensor, for a module with
    neither parameters nor Embeddings, or for an Embedding of another client.
    """
    if not isinstance(module, nn.Module):
        raise InvalidArgumentError("distribute() takes an nn.Module, not %s"
                                   % type(module).__name__)
    owners = {}
    for mod_name, mod in module.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            owners.setdefault(mod_name + "." + pname if mod_name else pname, (mod, pname))
    params, names = [], []
    for name, p in module.named_parameters():
        if p.dtype != torch.float32 or p.device.type != "cpu" or p.is_sparse:
            raise InvalidArgumentError(
                "parameter %r is a %s tensor on %s: pstrain variables hold float32 on the CPU "
                "(convert the module with .float() / .cpu())" % (name, p.dtype, p.device))
        params.append(p)
        names.append(name)
    embeddings = [m for m in module.modules() if isinstance(m, Embedding)]
    for emb in embeddings:
        if emb.client is not client:
            raise InvalidArgumentError("Embedding %r was made with another client than the one "
                                       "given to distribute()" % emb.name)
    if not params and not embeddings:
        raise InvalidArgumentError("distribute(): the module has no parameters and no Embedding")
    for i, (name, p) in enumerate(zip(names, params)):
        shape = tuple(p.shape)
        mod, pname = owners[name]
        init = _choose_initializer(initializer, mod, pname, shape, name)
        kwargs = {"initializer": init, "partitioner": partitioner}
        if optimizer is not None:
            kwargs["optimizer"] = optimizer
        index = client.create_variable(name, shape, **kwargs)
        if index != i:
            raise InvalidArgumentError(
                "parameter %r became variable %d of the client, not %d: distribute() needs a "
                "client that holds no other variables" % (name, index, i))
    return DistributedModule(module, client, params, names, embeddings)


# The tables each client created through Embedding, in creation order: (name, dim), by id of
# the client. Lookup and push_sparse take one key list per table of the client. A client's first
# table starts its list afresh, so a new client that reuses a freed one's id starts empty.
_client_tables = {}


def _tables(client):
    return _client_tables.setdefault(id(client), [])


def _num_tables(client):
    return len(_tables(client))


def _table_dims(client):
    return [dim for _, dim in _tables(client)]


class Embedding(nn.Module):
    """An embedding over the PS table `name` (rows of `dim` floats keyed by id), made with
    client.create_table (get-or-create; `optimizer`, `initializer` and the other keyword
    arguments are create_table's: admission, eviction).

    forward(ids): a LongTensor of any shape -> float32 [*ids.shape, dim]. The distinct ids are
    looked up through the client (one lookup per forward call; a lookup carries every table of
    the client, with no keys for the others), the rows copied into a leaf tensor of the unique
    rows, and the result gathered from it with index_select, so autograd reaches that leaf.
    With grad enabled, each forward's ids and leaf are kept until the next ps_model.push(), which
    sends their gradient rows (push_sparse sums the rows of an id used several times; a forward
    whose output got no gradient sends zero rows). Under torch.no_grad() nothing is kept.

    Ids must be >= 0 (and < num_embeddings when it is given); InvalidArgumentError otherwise.
    The client's tables must all be made through Embedding (their order is that of creation);
    several Embeddings may share one table (same name and options).
    """

    def __init__(self, client, name, dim, num_embeddings=None, *, optimizer=None,
                 initializer=None, **table_options):
        super().__init__()
        kwargs = dict(table_options)
        if optimizer is not None:
            kwargs["optimizer"] = optimizer
        if initializer is not None:
            kwargs["initializer"] = initializer
        self.index = client.create_table(name, dim=dim, **kwargs)
        tables = _tables(client)
        if self.index == 0 and tables and tables[0][0] != name:
            tables.clear()  # a new client at a freed one's id
        if self.index == len(tables):
            tables.append((name, dim))
        elif self.index > len(tables) or tables[self.index][0] != name:
            raise InvalidArgumentError(
                "table %r became table %d of the client, but %d were made through Embedding: "
                "make every table of the client with pstrain.torch.Embedding"
                % (name, self.index, len(tables)))
        self.client = client
        self.name = name
        self.dim = dim
        self.num_embeddings = num_embeddings
        self._pending = []

    def extra_repr(self):
        return "%r, dim=%d" % (self.name, self.dim)

    def forward(self, ids):
        if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int64, torch.int32):
            raise InvalidArgumentError("Embedding %r: ids must be an int64 (or int32) tensor, "
                                       "not %s" % (self.name, getattr(ids, "dtype", type(ids))))
        flat = ids.reshape(-1).to(torch.int64)
        unique, inverse = torch.unique(flat, return_inverse=True)
        if unique.numel() and unique[0] < 0:
            raise InvalidArgumentError("Embedding %r: id %d is negative"
                                       % (self.name, int(unique[0])))
        if self.num_embeddings is not None and unique.numel() and \
                unique[-1] >= self.num_embeddings:
            raise InvalidArgumentError("Embedding %r: id %d is not below num_embeddings=%d"
                                       % (self.name, int(unique[-1]), self.num_embeddings))
        keys = unique.numpy().view(np.uint64)
        request = [np.empty(0, dtype=np.uint64) for _ in range(_num_tables(self.client))]
        request[self.index] = keys
        rows = self.client.lookup(request)[self.index]
        leaf = torch.tensor(np.asarray(rows).reshape(len(keys), self.dim))
        if torch.is_grad_enabled():
            leaf.requires_grad_(True)
            self._pending.append((keys, leaf))
        return leaf.index_select(0, inverse).view(*ids.shape, self.dim)

    def _take_gradients(self):
        """(keys, grad rows) of the forwards since the last call, concatenated; forgets them."""
        pending, self._pending = self._pending, []
        if not pending:
            return np.empty(0, dtype=np.uint64), np.empty((0, self.dim), dtype=np.float32)
        keys = np.concatenate([k for k, _ in pending])
        grads = np.concatenate([
            (leaf.grad.numpy() if leaf.grad is not None
             else np.zeros((len(k), self.dim), dtype=np.float32)) for k, leaf in pending])
        return keys, grads


def load_state_dict(module, checkpoint, strict=True):
    """Fills the parameters of a plain ``module`` from a checkpoint (a path, as
    :func:`pstrain.load_checkpoint` takes, or a :class:`pstrain.Checkpoint`), by name: the
    variable named as the parameter's qualified name in ``module.named_parameters()`` (the names
    :func:`distribute` gives), so a trained model is evaluated or served with PyTorch alone.

    A parameter the checkpoint lacks raises :class:`pstrain.InvalidArgumentError` listing them
    (with ``strict=False`` it keeps its value); a shape that differs always raises, naming the
    parameter and both shapes, before any parameter is changed. Returns the names of the
    checkpoint's variables that no parameter took (``Embedding`` tables are in
    ``Checkpoint.tables``)."""
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)
    params = dict(module.named_parameters())
    missing = [name for name in params if name not in ckpt.variables]
    if strict and missing:
        raise InvalidArgumentError(
            "load_state_dict: the checkpoint %s has no variable for the parameters %s"
            % (ckpt.path, ", ".join(missing)))
    for name, p in params.items():
        if name in ckpt.variables and tuple(p.shape) != ckpt.variables[name].shape:
            raise InvalidArgumentError(
                "load_state_dict: parameter %s has shape %s, the checkpoint's variable %s"
                % (name, tuple(p.shape), ckpt.variables[name].shape))
    with torch.no_grad():
        for name, p in params.items():
            if name in ckpt.variables:
                p.copy_(torch.from_numpy(ckpt.variables[name]))
    return [name for name in ckpt.variables if name not in params]
