"""fosd._torch_ops: how one fosd linear layer's forward and backward run under PyTorch (for
fosd.torch): the weight's copy in fosd's cache (_WeightSlot), the Client calls of a forward and a
backward (run_forward, run_backward), and the two ways autograd reaches them:
  * _LinearFn, an autograd.Function: plain eager calls (and torch < 2.4), the fastest path;
  * the torch.library custom ops fosd::linear and fosd::linear_backward (torch >= 2.4) with fake
    implementations and registered autograd: what torch.compile, torch.export and other tracers
    see, so a fosd layer is one opaque node of the graph, not a graph break.
Invariants: both ways call run_forward / run_backward, so they give the same bits. An op names its
layer by weight name (a str; _OWNERS maps it to the live layer, weakly) and the recipe fields, and
returns the forward's fosd Context as a handle, a 0-d int64 CPU tensor indexing _CONTEXTS: the
entry goes when that tensor does (the autograd graph keeping it is freed), which releases the
Context on fosd unless a backward consumed it. Gradients come back in their input's dtype."""

import inspect
import itertools
import threading
import weakref
from typing import Any, Dict, Optional, Tuple

import torch

from . import _lib
from ._errors import Error, is_async_failure
from ._recipe import Recipe
from .client import _arr, placement

# fos_override_opt code -> the weight use its backward needs (PROTOCOL.md "Weight uses")
_BACKWARD_USE = {1: "quantized", 2: "high_precision", 3: "dequantized"}


def _scope_kw(fn: Any, scope: str) -> Dict[str, str]:
    """The four_over_six keyword for a Client call (the put's weight config): none for "all"
    (every client's behaviour), else {"four_over_six": scope}, refused clearly by a client that
    cannot take it."""
    if scope == "all":
        return {}
    if "four_over_six" not in inspect.signature(fn).parameters:
        raise Error(_lib.UNIMPLEMENTED, "four_over_six=%r: this fosd client has no per-operand four-over-six "
                    "scope (only 'all')" % scope)
    return {"four_over_six": scope}


def _drop(client: Any, name: str) -> None:
    if client.closed:
        return
    try:
        client.drop_weight(name)
    except Exception:  # gone already, fosd gone, or interpreter shutdown: nothing to free
        pass


class Opts:
    """A forward's option codes from a recipe (checked): override and row_scaled codes, the weight
    uses its puts declare (forwards without a context, and the backward its forwards with one
    resolve to: quantized, or high_precision for row-scaled X; fosd then keeps no bf16 master
    unless needed)."""

    __slots__ = ("recipe", "override", "row_scaled", "uses")

    def __init__(self, recipe: Recipe):
        self.recipe = recipe
        self.override = _lib.OVERRIDES[recipe.wire_override]
        self.row_scaled = 1 if recipe.row_scaled else 0
        self.uses = ("forward", _BACKWARD_USE[self.override or (2 if self.row_scaled else 1)])


class _WeightSlot:
    """One weight's copy in fosd's cache: its name, the version last put, and the parameter state
    (storage, in-place version, dtype, device, shape) and uses it was put with."""

    def __init__(self, client: Any, name: str, recipe: Recipe, devices: Any = None, replicas: int = 0,
                 version: int = 0):
        self.client, self.name, self.recipe = client, name, recipe
        self.bname = client._name(name)
        self._cfgs: Dict[Tuple[str, ...], Any] = {}  # uses -> its checked fos_weight_config
        self.placement = placement(devices, replicas)  # None: fosd's default
        self.version = version
        self.key: Any = None
        self.puts = 0
        self._mu = threading.Lock()  # one put at a time: versions stay in order across threads
        self._fin = weakref.finalize(self, _drop, client, name)

    def matches(self, client: Any, recipe: Recipe) -> bool:
        r = self.recipe
        return self.client is client and (r.weight_block, r.err, r.bound, r.four_over_six) == \
            (recipe.weight_block, recipe.err, recipe.bound, recipe.four_over_six)

    def succeed(self, client: Any, recipe: Recipe, devices: Any, replicas: int) -> "_WeightSlot":
        """The slot of the same name for a new client or weight config: on the same client it
        continues the version numbers and takes over the weight (this one no longer drops it)."""
        same = client is self.client
        if same:
            self._fin.detach()
        return _WeightSlot(client, self.name, recipe, devices, replicas, self.version if same else 0)

    @staticmethod
    def _key(w: torch.Tensor) -> Any:
        return (w.data_ptr(), w._version, w.dtype, w.device, tuple(w.shape))

    def put(self, w: torch.Tensor, uses: Tuple[str, ...]) -> int:
        with self._mu:
            return self._put(w, uses)

    def _cfg(self, uses: Tuple[str, ...]) -> Any:
        cfg = self._cfgs.get(uses)
        if cfg is None:
            r, c = self.recipe, self.client
            cfg = self._cfgs[uses] = c._weight_config(r.weight_block, r.err, r.bound, uses=uses,
                                                      **_scope_kw(c._weight_config, r.four_over_six))
        return cfg

    def _put(self, w: torch.Tensor, uses: Tuple[str, ...]) -> int:
        key = (self._key(w), uses)
        cfg = self._cfg(uses)
        # a new number for every try: a put whose reply was lost may have landed under the last one
        self.version += 1
        self.client._put(self.name, self.bname, _arr(w.detach(), "w", 2), self.version, cfg,
                         placement=self.placement)
        self.key = key
        self.puts += 1
        return self.version

    def ensure(self, w: torch.Tensor, uses: Tuple[str, ...]) -> int:
        """The version of w in fosd's cache, put first when w changed since the last put or the
        uses differ from that put's (the layer's override changed)."""
        with self._mu:
            if (self._key(w), uses) != self.key:
                return self._put(w, uses)
            return self.version

    def forward_put(self, w: torch.Tensor, uses: Tuple[str, ...], fwd: Any) -> Any:
        """fwd(version, put) -> the forward's result, with the weight put inside the forward (put:
        (w, cfg), fos_forward_put) when w changed since the last put and the client can carry a
        put in a forward (fused_put), else after a separate put when it changed (put None). One
        round trip per layer and step in a training loop."""
        with self._mu:
            key = (self._key(w), uses)
            if key == self.key:
                version = self.version
            elif self.placement is None and fused_put(self.client):
                self.version += 1
                try:
                    r = fwd(self.version, (w.detach(), self._cfg(uses)))
                except Error as e:
                    if not _fusion_refused(e):
                        raise
                    _fusion_off(self.client, e)
                else:
                    self.key = key
                    self.puts += 1
                    return r
                version = self._put(w, uses)
            else:
                version = self._put(w, uses)
        return fwd(version, None)


def fused_put(client: Any) -> bool:
    """Whether client's puts travel inside forwards (fos_forward_put): its libfos has the call and
    fosd did not refuse one (Client.fused_put_off_reason says why not)."""
    off = getattr(client, "_fused_off", None)
    if off is None:
        off = client._fused_off = "" if _lib.has(client._lib, "fos_forward_put") else \
            "this libfos has no fos_forward_put"
    return not off


def _fusion_refused(e: Error) -> bool:
    """fosd cannot run a put inside a forward: one serving several devices (FAILED_PRECONDITION
    naming it), or one that predates it: it ignores the put, so the forward's version is not
    cached (NOT_FOUND) or, W inline, its bytes lie past the request's last tensor."""
    if is_async_failure(e):
        return False
    c, m = e.code_number, e.message
    return (c == _lib.FAILED_PRECONDITION and "put inside a forward" in m) or c == _lib.NOT_FOUND or \
        (c == _lib.INVALID_ARGUMENT and "beyond its last tensor" in m)


def _fusion_off(client: Any, e: Error) -> None:
    client._fused_off = "fosd refused a put inside a forward: %s" % e


def run_forward(slot: _WeightSlot, opts: Opts, x2: torch.Tensor, weight: torch.Tensor,
                bias: Optional[torch.Tensor], save: bool) -> Tuple[torch.Tensor, Any]:
    """y (M, N) in x2's dtype and the forward's Context (None unless save) for a 2-D x2; M = 0
    gives an empty y without asking fosd. The weight goes with the forward when it changed since
    its last put (_WeightSlot.forward_put). If fosd lost the weight (restart, eviction), it is put
    again and the forward retried once. The four_over_six scope travels with the weight's put
    (a forward without one follows its weight's)."""
    if x2.shape[0] == 0:
        return x2.new_empty((0, weight.shape[0])), None
    client = slot.client

    def fwd(version: int, put: Any) -> Any:
        return client._forward(slot.name, slot.bname, x2, bias, version, opts.override, opts.row_scaled, save,
                               put=put)
    try:
        r = slot.forward_put(weight, opts.uses, fwd)
    except Error as e:
        if e.code_number != _lib.NOT_FOUND or is_async_failure(e):
            raise
        version = slot.put(weight, opts.uses)
        r = fwd(version, None)
    y, ctx = r if save else (r, None)
    return (y if y.dtype == x2.dtype else y.to(x2.dtype)), ctx


def run_backward(ctx: Any, dy: torch.Tensor, x2: torch.Tensor, bias: Optional[torch.Tensor],
                 wshape: Tuple[int, ...], wdtype: torch.dtype, need_dx: bool,
                 need_dw: bool) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor], Optional[torch.Tensor]]:
    """(dx, dw, db) of a forward with Context ctx (None for M = 0: dx empty, dw and db zeros, as
    torch.nn.Linear), each in its input's dtype; a gradient not needed is not computed (fosd skips
    its GEMM) and comes back None, db None without a bias. A context that expired on fosd (its
    TTL, eviction, or consumed by an earlier backward) is recomputed from x2 and bias."""
    dy = dy if dy.dim() == 2 else dy.reshape(-1, dy.shape[-1])
    if x2.shape[0] == 0:
        dx = x2.new_empty(x2.shape) if need_dx else None
        dw = x2.new_zeros(wshape, dtype=wdtype) if need_dw else None
        db = bias.new_zeros(bias.shape) if bias is not None else None
        return dx, dw, db
    if ctx is None:
        raise Error(_lib.FAILED_PRECONDITION, "backward of a fosd forward that saved no context (it ran "
                    "without grad)")
    client = ctx._client
    try:
        dx, dw, db = client.backward(ctx, dy, need_dx=need_dx, need_dw=need_dw)
    except Error as e:
        if e.code_number != _lib.NOT_FOUND or is_async_failure(e):
            raise
        dx, dw, db = client.backward(ctx, dy, x=x2, bias=bias, need_dx=need_dx, need_dw=need_dw)
    if dx is not None and dx.dtype != x2.dtype:
        dx = dx.to(x2.dtype)
    if dw is not None and dw.dtype != wdtype:
        dw = dw.to(wdtype)
    if db is not None and bias is not None and db.dtype != bias.dtype:
        db = db.to(bias.dtype)
    return dx, dw, db


class LinearFn(torch.autograd.Function):
    """The eager path: y = x2 W^T + b for 2-D x2 through run_forward / run_backward."""

    @staticmethod
    def forward(ctx: Any, x2: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                slot: _WeightSlot, opts: Opts) -> torch.Tensor:
        need = ctx.needs_input_grad
        save = need[0] or need[1] or need[2]
        y, fctx = run_forward(slot, opts, x2, weight, bias, save)
        if save:
            ctx.fos = fctx  # released by its finalizer when the graph (this node) is freed
            ctx.wmeta = (tuple(weight.shape), weight.dtype)
            ctx.save_for_backward(x2, bias)
        return y

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> Tuple[Any, ...]:
        x2, bias = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        dx, dw, db = run_backward(ctx.fos, gy, x2, bias, ctx.wmeta[0], ctx.wmeta[1], need_x, need_w)
        return dx, dw, db if need_b else None, None, None


# ---- the custom ops (torch >= 2.4) ------------------------------------------------------------

HAVE_OPS = hasattr(torch, "library") and hasattr(torch.library, "custom_op")
_OWNERS: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()  # name -> layer
_CONTEXTS: Dict[int, Any] = {}  # handle -> the forward's fosd Context
_handles = itertools.count(1)
_OPTS: Dict[Recipe, Opts] = {}


def register_owner(name: str, layer: Any) -> None:
    """Makes layer (an object with _weight_slot()) the one the ops find under its weight name."""
    _OWNERS[name] = layer


def _opts_for(recipe: Recipe) -> Opts:
    o = _OPTS.get(recipe)
    if o is None:
        o = _OPTS[recipe] = Opts(recipe)
    return o


def _layer_slot(name: str, recipe: Recipe) -> _WeightSlot:
    layer = _OWNERS.get(name)
    if layer is None:
        raise Error(_lib.FAILED_PRECONDITION, "fosd::linear: no fosd.torch layer with weight name %r lives in "
                    "this process (an exported program runs with the model that made it)" % name)
    if layer.recipe != recipe:
        raise Error(_lib.FAILED_PRECONDITION, "fosd::linear: layer %r has recipe %r, the op was traced with "
                    "%r: trace it again" % (name, layer.recipe, recipe))
    return layer._weight_slot()


def _forget(handle: int) -> None:
    _CONTEXTS.pop(handle, None)  # the Context's own finalizer releases it on fosd


if HAVE_OPS:
    Tensor = torch.Tensor

    @torch.library.custom_op("fosd::linear", mutates_args=())
    def linear_op(x: Tensor, weight: Tensor, bias: Optional[Tensor], name: str, override: str,
                  weight_block: str, row_scaled: bool, err: str, bound: int, four_over_six: str,
                  save: bool) -> Tuple[Tensor, Tensor]:
        """y (M, N) = x (M, K) weight^T + bias through fosd with the layer named name (its weight
        put as the recipe fields say), and the handle of the forward's Context (0 unless save)."""
        recipe = Recipe(override, weight_block, row_scaled, err, bound, four_over_six)
        y, ctx = run_forward(_layer_slot(name, recipe), _opts_for(recipe), x, weight, bias, save)
        h = torch.zeros((), dtype=torch.int64)
        if ctx is not None:
            i = next(_handles)
            _CONTEXTS[i] = ctx
            h.fill_(i)
            weakref.finalize(h, _forget, i)
        return y, h

    @linear_op.register_fake
    def _linear_fake(x, weight, bias, name, override, weight_block, row_scaled, err, bound, four_over_six, save):
        return x.new_empty((x.shape[0], weight.shape[0])), x.new_empty((), dtype=torch.int64, device="cpu")

    @torch.library.custom_op("fosd::linear_backward", mutates_args=())
    def linear_backward_op(dy: Tensor, handle: Tensor, x: Tensor, weight: Tensor, bias: Optional[Tensor],
                           need_dx: bool, need_dw: bool) -> Tuple[Tensor, Tensor, Tensor]:
        """(dx, dw, db) of the forward whose Context handle is handle; a gradient not needed (and
        db without a bias) comes back as an empty tensor."""
        ctx = _CONTEXTS.get(int(handle))
        dx, dw, db = run_backward(ctx, dy, x, bias, tuple(weight.shape), weight.dtype, need_dx, need_dw)
        empty = dy.new_empty((0,))
        return (dx if dx is not None else empty, dw if dw is not None else empty.clone(),
                db if db is not None else empty.clone())

    @linear_backward_op.register_fake
    def _linear_backward_fake(dy, handle, x, weight, bias, need_dx, need_dw):
        dx = x.new_empty(x.shape) if need_dx else dy.new_empty((0,))
        dw = weight.new_empty(weight.shape) if need_dw else dy.new_empty((0,))
        db = bias.new_empty(bias.shape) if bias is not None else dy.new_empty((0,))
        return dx, dw, db

    def _setup_context(ctx, inputs, output):
        x, weight, bias = inputs[:3]
        ctx.save_for_backward(x, weight, bias, output[1])

    def _backward(ctx, gy, gh):
        x, weight, bias, h = ctx.saved_tensors
        need = ctx.needs_input_grad
        dx, dw, db = torch.ops.fosd.linear_backward(gy, h, x, weight, bias, need[0], need[1])
        return (dx if need[0] else None, dw if need[1] else None, db if need[2] else None) + (None,) * 8

    linear_op.register_autograd(_backward, setup_context=_setup_context)


_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
if _is_compiling is None and HAVE_OPS:
    _is_compiling = torch._dynamo.is_compiling
FORCE_OPS = False  # tests: the custom ops in eager calls too


def use_ops(x: torch.Tensor) -> bool:
    """True where a fosd layer must go through the custom ops: a torch.compile / torch.export
    trace, a fake or other tensor subclass, a dispatch mode (make_fx); else the eager path."""
    if not HAVE_OPS:
        return False
    if FORCE_OPS or _is_compiling():
        return True
    return type(x) not in (torch.Tensor, torch.nn.Parameter) or torch._C._len_torch_dispatch_stack() > 0


def linear_op_call(x2: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], name: str,
                   recipe: Recipe) -> torch.Tensor:
    """y for 2-D x2 through fosd::linear (its context saved when autograd will want a backward)."""
    save = torch.is_grad_enabled() and (x2.requires_grad or weight.requires_grad or
                                        (bias is not None and bias.requires_grad))
    y, _ = torch.ops.fosd.linear(x2, weight, bias, name, recipe.override, recipe.weight_block, recipe.row_scaled,
                                 recipe.err, recipe.bound, recipe.four_over_six, save)
    return y
