"""fosd.torch: PyTorch layers whose forward and backward run on fosd.

  Linear(in_features, out_features, bias=True, device=None, dtype=None, *, recipe=None, client=None,
         name=None, devices=None, replicas=0, override=, weight_block=, row_scaled=, err=, bound=,
         four_over_six=)
      a torch.nn.Linear subclass (same parameters, state_dict keys and initialization; dtype
      torch.get_default_dtype() unless given), y = x W^T + b computed by fosd as an NVFP4
      four-over-six linear layer (fosd.Recipe says how), with its backward through fosd.
  linear(x, weight, bias=None, *, recipe=None, client=None, ...)   the same as a function
  convert(model, recipe=None, filter_fn=None, skip_unsupported=True, *, client=None, ...)
      replaces the nn.Linear layers of a model by Linear layers sharing their parameters (an
      optimizer made before keeps working); unconvert(model) puts nn.Linear layers back
  unquantized(model=None)   a context manager: fosd layers (of model, else all) run as plain
      F.linear in it, the same model unquantized

How a layer talks to fosd:
  * The weight is an ordinary parameter. fosd keeps a quantized copy under a name unique to the
    layer (name=, else one made from the process id, a random tag and a counter), put again at the
    first forward after the weight changed: an optimizer step (the parameter's in-place version
    counter moves), a load_state_dict, a move to another device. Each put has the next version
    number, and the forward asks for exactly that version. Each put declares the uses the layer's
    calls need (forwards without a context, and the backward of its override), so fosd keeps no
    more than those (PROTOCOL.md "Weight uses"). The copy is dropped from fosd when the layer (for
    linear(): the weight tensor) is garbage collected.
  * With autograd on, the forward saves its context on fosd; the backward sends dY and gets dX, dW
    and db. The context belongs to the autograd graph: a graph freed without a backward releases
    it. A context that expired on fosd (its TTL, or evicted) is recomputed from X, which the graph
    keeps as a saved tensor (so modifying X in place before the backward is caught by autograd).
  * X may have any leading shape (flattened to (M, K)); M = 0 gives an empty Y and zero weight
    gradients without asking fosd. Results come back in X's dtype (fosd works in bf16; under
    torch.autocast in the autocast dtype), gradients in their parameter's dtype, on X's device.
  * torch.compile and torch.export see each layer as the custom op fosd::linear (its backward
    fosd::linear_backward; torch >= 2.4): no graph break, the eager bits (fosd._torch_ops).
  * If fosd lost the weight (restart, eviction), the forward puts it again and retries once.
"""

import contextlib
import itertools
import operator
import os
import warnings
from typing import Any, Callable, Iterator, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

import fosd as _fosd

from . import _lib, _torch_ops as _ops
from ._errors import Error
from ._recipe import Recipe
from .client import placement

__all__ = ["Linear", "Recipe", "linear", "convert", "unconvert", "unquantized", "supported"]

_seq = itertools.count(1)
_tag = "%d.%s" % (os.getpid(), os.urandom(3).hex())
_LOOSE = ("override", "weight_block", "row_scaled", "err", "bound", "four_over_six")
_unquantized_all = [0]  # depth of unquantized() without a model


def unique_name() -> str:
    """A weight name no other layer of any process on this host uses."""
    return "py.%s.%d" % (_tag, next(_seq))


def _recipe_of(recipe: Optional[Recipe], where: str, **loose: Any) -> Recipe:
    """recipe (default Recipe()) with the loose options given (not None) in place of its fields."""
    if recipe is not None and not isinstance(recipe, Recipe):
        raise TypeError("%s: recipe must be a fosd.Recipe, got %r" % (where, recipe))
    base = recipe if recipe is not None else Recipe()
    changes = {k: v for k, v in loose.items() if v is not None}
    return base.replace(**changes) if changes else base


def supported(in_features: int, out_features: int) -> Optional[str]:
    """None when fosd takes a layer of these sizes, else why not (the rule and the value): fosd's
    shape rule (NUMERICS.md section 8) wants N = out_features and K = in_features positive
    multiples of 16 (M, the rows of X, may be anything)."""
    for what, v in (("in_features (K)", in_features), ("out_features (N)", out_features)):
        try:
            ok = not isinstance(v, bool) and operator.index(v) > 0 and operator.index(v) % 16 == 0
        except TypeError:
            ok = False
        if not ok:
            return ("%s = %r is not a positive multiple of 16, which fosd's NVFP4 blocks need for N and K: pad "
                    "the layer, or keep it a torch.nn.Linear (convert(..., skip_unsupported=True) does)"
                    % (what, v))
    return None


def _check_size(in_features: int, out_features: int) -> None:
    why = supported(in_features, out_features)
    if why is not None:
        raise Error(_lib.INVALID_ARGUMENT, why)


def _autocast_dtype(device_type: str) -> Optional[torch.dtype]:
    """The autocast dtype active for device_type, None when autocast is off there."""
    if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4
        if device_type in ("cpu", "cuda") and torch.is_autocast_enabled(device_type):
            return torch.get_autocast_dtype(device_type)
        return None
    if device_type == "cpu":
        return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None
    if device_type == "cuda":
        return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None
    return None


class Linear(nn.Linear):
    """torch.nn.Linear through fosd (see the module comment): y = x W^T + b as an NVFP4
    four-over-six layer, forward and backward computed by fosd.

    in_features, out_features: K and N, each a positive multiple of 16 (fosd's shape rule; other
        sizes raise fosd.Error INVALID_ARGUMENT naming the rule and the value).
    bias: whether the layer has a bias.
    device, dtype: of the parameters, as torch.nn.Linear (dtype torch.get_default_dtype() unless
        given); fosd rounds the weight to bf16 when it puts it.
    recipe: a fosd.Recipe (default fosd.Recipe()): the numerics.
    client: the fosd.Client to use (default fosd.default_client(), looked up at each forward).
    name: the weight's name in fosd's cache (default a name unique to the layer and process).
    devices, replicas: where a fosd serving several devices keeps the weight's copies
        (Client.put_weight's; PROTOCOL.md "Devices"), passed with every put.
    override, weight_block, row_scaled, err, bound, four_over_six: a recipe field each, in place of
        the recipe's (fosd.Recipe documents them); None keeps the recipe's.

    layer.recipe is the recipe in use (assign a new one to change it); layer.override etc. read
    (and assign) its fields."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Optional[torch.dtype] = None, *, recipe: Optional[Recipe] = None, client: Any = None,
                 name: Optional[str] = None, devices: Optional[Sequence[int]] = None, replicas: int = 0,
                 override: Optional[str] = None, weight_block: Optional[str] = None,
                 row_scaled: Optional[bool] = None, err: Optional[str] = None, bound: Optional[int] = None,
                 four_over_six: Optional[str] = None) -> None:
        _check_size(in_features, out_features)
        r = _recipe_of(recipe, "Linear", override=override, weight_block=weight_block, row_scaled=row_scaled,
                       err=err, bound=bound, four_over_six=four_over_six)
        placement(devices, replicas)
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self._setup(r, client, name, devices, replicas)

    def _setup(self, recipe: Recipe, client: Any, name: Optional[str], devices: Any, replicas: int) -> None:
        self.recipe = recipe
        self.devices = list(devices) if devices is not None else None
        self.replicas = replicas
        self._client = client
        self._auto_name = name is None
        self.name = name if name is not None else unique_name()
        self._slot: Optional[_ops._WeightSlot] = None
        self._opts: Optional[_ops.Opts] = None
        self._fosd_unquantized = False
        _ops.register_owner(self.name, self)

    @classmethod
    def from_linear(cls, lin: nn.Linear, recipe: Optional[Recipe] = None, *, client: Any = None,
                    name: Optional[str] = None, devices: Optional[Sequence[int]] = None, replicas: int = 0,
                    **options: Any) -> "Linear":
        """A Linear sharing lin's weight and bias parameters (the same Parameter objects).
        lin: the torch.nn.Linear; recipe, client, name, devices, replicas and options (override=,
        weight_block=, ...): as Linear's. Sizes fosd refuses raise fosd.Error INVALID_ARGUMENT."""
        for k in options:
            if k not in _LOOSE:
                raise TypeError("from_linear: unknown option %r" % k)
        _check_size(lin.in_features, lin.out_features)
        r = _recipe_of(recipe, "from_linear", **options)
        placement(devices, replicas)
        m = cls.__new__(cls)
        nn.Module.__init__(m)
        m.in_features, m.out_features = lin.in_features, lin.out_features
        m.weight = lin.weight
        m.bias = lin.bias
        m.train(lin.training)
        m._setup(r, client, name, devices, replicas)
        return m

    # the recipe's fields, readable and assignable one by one
    def _field(f: str) -> property:  # type: ignore[misc]
        return property(lambda self: getattr(self.recipe, f),
                        lambda self, v: setattr(self, "recipe", self.recipe.replace(**{f: v})),
                        doc="recipe.%s (assigning it replaces the recipe)" % f)

    override = _field("override")
    weight_block = _field("weight_block")
    row_scaled = _field("row_scaled")
    err = _field("err")
    bound = _field("bound")
    four_over_six = _field("four_over_six")
    del _field

    @property
    def client(self) -> Any:
        """The fosd.Client the layer uses (its own, else fosd.default_client())."""
        return self._client if self._client is not None else _fosd.default_client()

    @property
    def puts(self) -> int:
        """How often this layer has put its weight into fosd's cache."""
        return self._slot.puts if self._slot is not None else 0

    @property
    def weight_version(self) -> int:
        """The version of the weight in fosd's cache (0 before the first forward)."""
        return self._slot.version if self._slot is not None else 0

    def _weight_slot(self) -> "_ops._WeightSlot":
        c, s = self.client, self._slot
        if s is None or not s.matches(c, self.recipe):
            if s is None:
                s = _ops._WeightSlot(c, self.name, self.recipe, self.devices, self.replicas)
            else:
                s = s.succeed(c, self.recipe, self.devices, self.replicas)
            self._slot = s
        return s

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """y = input W^T + b through fosd. input: (..., in_features), any floating dtype."""
        if _unquantized_all[0] or self._fosd_unquantized:
            return _plain(input, self.weight, self.bias)
        x, k, n = input, self.in_features, self.out_features
        if x.dim() < 1 or x.shape[-1] != k:
            raise Error(_lib.INVALID_ARGUMENT, "x %s: its last dimension must be in_features = %d"
                        % (tuple(x.shape), k))
        dt = _autocast_dtype(x.device.type)
        if dt is not None and x.is_floating_point() and x.dtype != dt:
            x = x.to(dt)
        x2 = x if x.dim() == 2 else x.reshape(-1, k)
        if _ops.use_ops(x2):
            y = _ops.linear_op_call(x2, self.weight, self.bias, self.name, self.recipe)
        else:
            o = self._opts
            if o is None or o.recipe is not self.recipe:
                o = self._opts = _ops.Opts(self.recipe)
            y = _ops.LinearFn.apply(x2, self.weight, self.bias, self._weight_slot(), o)
        return y if x.dim() == 2 else y.reshape(x.shape[:-1] + (n,))

    def extra_repr(self) -> str:
        r = self.recipe
        s = "in_features=%d, out_features=%d, bias=%s, name=%r, override=%s, weight_block=%s, " \
            "row_scaled=%s, err=%s, bound=%d, four_over_six=%s" % (
                self.in_features, self.out_features, self.bias is not None, self.name, r.override,
                r.weight_block, r.row_scaled, r.err, r.bound, r.four_over_six)
        if self.devices is not None:
            s += ", devices=%s" % (self.devices,)
        if self.replicas:
            s += ", replicas=%d" % self.replicas
        return s

    # a copy (deepcopy, pickle) is another layer: a fresh slot, and a fresh name unless one was
    # given; a deep copy shares the client (a Client cannot be pickled: pickle the state_dict)
    def __getstate__(self) -> dict:
        s = self.__dict__.copy()
        s["_slot"] = None
        s["_opts"] = None
        if s.get("_auto_name"):
            s["name"] = None
        return s

    def __setstate__(self, s: dict) -> None:
        super().__setstate__(s)
        if self.name is None:
            self.name = unique_name()
        _ops.register_owner(self.name, self)


def _plain(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """F.linear, the parameters cast to x's dtype when they differ and autocast is off."""
    if _autocast_dtype(x.device.type) is None and weight.dtype != x.dtype:
        weight = weight.to(x.dtype)
        bias = bias.to(x.dtype) if bias is not None else None
    return F.linear(x, weight, bias)


@contextlib.contextmanager
def unquantized(model: Optional[nn.Module] = None) -> Iterator[None]:
    """Within it, fosd layers run as plain torch F.linear (the same model unquantized, e.g. to
    compare against it). model: only its fosd.torch.Linear layers (default: every one in the
    process). Nests; the previous state comes back on exit."""
    if model is None:
        _unquantized_all[0] += 1
        try:
            yield
        finally:
            _unquantized_all[0] -= 1
        return
    layers = [m for m in model.modules() if isinstance(m, Linear)]
    before = [m._fosd_unquantized for m in layers]
    for m in layers:
        m._fosd_unquantized = True
    try:
        yield
    finally:
        for m, b in zip(layers, before):
            m._fosd_unquantized = b


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, *,
           recipe: Optional[Recipe] = None, client: Any = None, devices: Optional[Sequence[int]] = None,
           replicas: int = 0, override: Optional[str] = None, weight_block: Optional[str] = None,
           row_scaled: Optional[bool] = None, err: Optional[str] = None, bound: Optional[int] = None,
           four_over_six: Optional[str] = None) -> torch.Tensor:
    """y = x weight^T + bias through fosd, with its backward (see the module comment).
    x: (..., K); weight: (N, K), N and K multiples of 16; bias: (N,) or None; recipe, client,
    devices, replicas, override, weight_block, row_scaled, err, bound, four_over_six: as Linear's.
    fosd keeps weight quantized under a name tied to the weight tensor, put again when it changes
    and dropped when the tensor is garbage collected. Eager only: under torch.compile use Linear."""
    r = _recipe_of(recipe, "linear", override=override, weight_block=weight_block, row_scaled=row_scaled,
                   err=err, bound=bound, four_over_six=four_over_six)
    placement(devices, replicas)
    n, k = weight.shape
    if x.dim() < 1 or x.shape[-1] != k:
        raise Error(_lib.INVALID_ARGUMENT, "x %s: its last dimension must be K = %d" % (tuple(x.shape), k))
    c = client if client is not None else _fosd.default_client()
    o = _ops.Opts(r)
    slots = weight.__dict__.setdefault("_fosd_slots", {})
    # one copy per use: calls with different overrides on one weight do not put it again in turn
    key = (id(c), r.weight_block, r.err, r.bound, r.four_over_six,
           tuple(devices) if devices is not None else None, replicas, o.uses)
    slot = slots.get(key)
    if slot is None or slot.client is not c:
        slot = slots[key] = _ops._WeightSlot(c, unique_name(), r, devices, replicas)
    x2 = x if x.dim() == 2 else x.reshape(-1, k)
    y = _ops.LinearFn.apply(x2, weight, bias, slot, o)
    return y if x.dim() == 2 else y.reshape(x.shape[:-1] + (n,))


def convert(model: nn.Module, recipe: Optional[Recipe] = None,
            filter_fn: Optional[Callable[[nn.Module, str], bool]] = None, skip_unsupported: bool = True, *,
            client: Any = None, devices: Optional[Sequence[int]] = None, replicas: int = 0,
            include: Optional[Callable[[str, nn.Module], bool]] = None, **options: Any) -> nn.Module:
    """Replaces every torch.nn.Linear of model (itself included) by a fosd.torch.Linear sharing its
    parameters. Returns model (a new module when model itself is an nn.Linear).
    model: the module; recipe: a fosd.Recipe for every layer converted (default fosd.Recipe());
    filter_fn: (module, fqn) -> bool, which layers to convert (fqn its qualified name, "" for model
        itself; default all), as torchao's quantize_;
    skip_unsupported: layers of sizes fosd refuses (in_features or out_features not a multiple of
        16) stay nn.Linear; False raises fosd.Error INVALID_ARGUMENT for them;
    client, devices, replicas: as Linear's; options: recipe fields (override=, ...) in place of the
        recipe's; include: deprecated, (fqn, module) -> bool, use filter_fn."""
    if include is not None:
        warnings.warn("fosd.torch.convert(include=(name, module)) is deprecated: use "
                      "filter_fn=(module, fqn) -> bool", DeprecationWarning, stacklevel=2)
        if filter_fn is not None:
            raise TypeError("convert: give filter_fn or include, not both")
        inc = include
        filter_fn = lambda m, fqn: inc(fqn, m)  # noqa: E731
    for k in options:
        if k not in _LOOSE:
            raise TypeError("convert: unknown option %r" % k)
    r = _recipe_of(recipe, "convert", **options)
    placement(devices, replicas)

    def new(m: nn.Module, fqn: str) -> Optional[nn.Module]:
        if not isinstance(m, nn.Linear) or isinstance(m, Linear):
            return None
        if filter_fn is not None and not filter_fn(m, fqn):
            return None
        if skip_unsupported and supported(m.in_features, m.out_features) is not None:
            return None
        return Linear.from_linear(m, r, client=client, devices=devices, replicas=replicas)

    return _replace(model, new)


def unconvert(model: nn.Module) -> nn.Module:
    """Replaces every fosd.torch.Linear of model (itself included) by a torch.nn.Linear sharing its
    parameters (the fosd copies are dropped with the layers). model: the module. Returns model (a
    new module when model itself is a fosd.torch.Linear)."""

    def new(m: nn.Module, fqn: str) -> Optional[nn.Module]:
        if not isinstance(m, Linear):
            return None
        lin = nn.Linear.__new__(nn.Linear)
        nn.Module.__init__(lin)
        lin.in_features, lin.out_features = m.in_features, m.out_features
        lin.weight = m.weight
        lin.bias = m.bias
        lin.train(m.training)
        return lin

    return _replace(model, new)


def _replace(model: nn.Module, new: Callable[[nn.Module, str], Optional[nn.Module]]) -> nn.Module:
    top = new(model, "")
    if top is not None:
        return top
    todo: List[Any] = []
    for qual, parent in model.named_modules():
        for cname, child in parent.named_children():
            m = new(child, "%s.%s" % (qual, cname) if qual else cname)
            if m is not None:
                todo.append((parent, cname, m))
    for parent, cname, m in todo:
        setattr(parent, cname, m)
    return model
