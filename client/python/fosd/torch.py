"""fosd.torch: PyTorch layers whose forward and backward run on fosd.

  Linear(in_features, out_features, bias=True, *, client=None, name=None, override=None,
         weight_block="16x16", row_scaled=False, err="mae", bound=256, device=None,
         dtype=torch.bfloat16, devices=None, replicas=0)
      an nn.Module like torch.nn.Linear (same parameters, same initialization), y = x W^T + b
      computed by fosd as an NVFP4 four-over-six linear layer, with its backward through fosd.
      devices, replicas: where a fosd serving several devices keeps the weight's copies
      (Client.put_weight's; PROTOCOL.md "Devices"), passed with every put.
  linear(x, weight, bias=None, *, client=None, **options)   the same as a function
  convert(module, *, client=None, include=None, **options)  replaces the nn.Linear layers of a
      model by Linear layers sharing their parameters (an optimizer made before keeps working)

How a layer talks to fosd:
  * The weight is an ordinary parameter. fosd keeps a quantized copy under a name unique to the
    layer (name=, else one made from the process id, a random tag and a counter), put again at the
    first forward after the weight changed: an optimizer step (the parameter's in-place version
    counter moves), a load_state_dict, a move to another device. Each put has the next version
    number, and the forward asks for exactly that version. Each put declares the uses the layer's
    calls need (forwards without a context, and the backward of its override), so fosd keeps no
    more than those (no bf16 master unless the override is high_precision; PROTOCOL.md "Weight
    uses"). The copy is dropped from fosd when the layer (for linear(): the weight tensor) is
    garbage collected.
  * With autograd on, the forward saves its context on fosd; the backward sends dY and gets dX, dW
    and db. The context belongs to the autograd graph: a graph freed without a backward (an
    evaluation with grad on, an exception) releases it, through a finalizer of the Context kept on
    the graph's node. A context that expired on fosd (its TTL, or evicted) is recomputed from X,
    which the node keeps as a saved tensor (so modifying X in place before the backward is caught
    by autograd, as for torch.nn.Linear).
  * X may have any leading shape (flattened to (M, K)). Results come back in X's dtype (fosd works
    in bf16); gradients in their parameter's dtype, on X's device.
  * If fosd lost the weight (restart, eviction), the forward puts it again and retries once.
"""

import itertools
import os
import threading
import weakref

import torch
from torch import nn

import fosd as _fosd

from . import _lib
from ._errors import Error
from .client import _arr, _opt, placement

__all__ = ["Linear", "linear", "convert"]

_seq = itertools.count(1)
_tag = "%d.%s" % (os.getpid(), os.urandom(3).hex())


def unique_name():
    """A weight name no other layer of any process on this host uses."""
    return "py.%s.%d" % (_tag, next(_seq))


def _check_options(override, weight_block, row_scaled, err, bound, devices=None, replicas=0):
    placement(devices, replicas)
    _opt(_lib.OVERRIDES, override, "override")
    _opt(_lib.BLOCKS, weight_block, "weight_block")
    _opt(_lib.ERR_MODES, err, "err")
    if bound not in (256, 448) or isinstance(bound, bool):
        raise Error(_lib.INVALID_ARGUMENT, "bound: %r is not 256 or 448" % (bound,))
    if row_scaled and override == "quantized":
        raise Error(_lib.INVALID_ARGUMENT, "override 'quantized' cannot be used with row_scaled "
                    "(row-scaled X has no columnwise copy)")


def _drop(client, name):
    if client.closed:
        return
    try:
        client.drop_weight(name)
    except Exception:  # gone already, fosd gone, or interpreter shutdown: nothing to free
        pass


# fos_override_opt code -> the weight use its backward needs (PROTOCOL.md "Weight uses")
_BACKWARD_USE = {1: "quantized", 2: "high_precision", 3: "dequantized"}


def _uses(override, row_scaled):
    """The uses a layer's puts declare, given its checked override code: forwards without a
    context, and the backward its forwards with one resolve to (the default override: quantized,
    high_precision for row-scaled X; fos_wire_enums.h). fosd then keeps only what they need (no
    bf16 master unless high_precision); the results are the same bits."""
    return ("forward", _BACKWARD_USE[override or (2 if row_scaled else 1)])


class _WeightSlot:
    """One weight's copy in fosd's cache: its name, the version last put, and the parameter
    state (storage, in-place version, dtype, device, shape) and uses it was put with."""

    def __init__(self, client, name, weight_block, err, bound, devices=None, replicas=0):
        self.client, self.name = client, name
        self.weight_block, self.err, self.bound = weight_block, err, bound
        self.bname = client._name(name)
        self._cfgs = {}  # uses -> its checked fos_weight_config
        self.placement = placement(devices, replicas)  # None: fosd's default
        self.version = 0
        self.key = None
        self.puts = 0
        self._mu = threading.Lock()  # one put at a time: versions stay in order across threads
        self._fin = weakref.finalize(self, _drop, client, name)

    @staticmethod
    def _key(w):
        return (w.data_ptr(), w._version, w.dtype, w.device, tuple(w.shape))

    def put(self, w, uses):
        with self._mu:
            return self._put(w, uses)

    def _put(self, w, uses):
        key = (self._key(w), uses)
        cfg = self._cfgs.get(uses)
        if cfg is None:
            cfg = self._cfgs[uses] = self.client._weight_config(self.weight_block, self.err, self.bound,
                                                                uses=uses)
        # a new number for every try: a put whose reply was lost may have landed under the last one
        self.version += 1
        self.client._put(self.name, self.bname, _arr(w.detach(), "w", 2), self.version, cfg,
                         placement=self.placement)
        self.key = key
        self.puts += 1
        return self.version

    def ensure(self, w, uses):
        """The version of w in fosd's cache, put first when w changed since the last put or the
        uses differ from that put's (the layer's override changed)."""
        with self._mu:
            if (self._key(w), uses) != self.key:
                return self._put(w, uses)
            return self.version


class _Call:
    """What one forward of a layer needs (kept on the autograd node): the client, the weight's
    slot and the forward's option codes (checked)."""

    __slots__ = ("client", "slot", "options", "override", "row_scaled", "uses")

    def __init__(self, client, slot, override, row_scaled):
        self.client, self.slot, self.options = client, slot, (override, row_scaled)
        self.override, self.row_scaled = _opt(_lib.OVERRIDES, override, "override"), 1 if row_scaled else 0
        self.uses = _uses(self.override, self.row_scaled)


class _LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, call):
        k = weight.shape[1]
        flat = x.dim() == 2
        if not flat and (x.dim() < 1 or x.shape[-1] != k) or flat and x.shape[1] != k:
            raise Error(_lib.INVALID_ARGUMENT, "x %s: its last dimension must be in_features = %d"
                        % (tuple(x.shape), k))
        x2 = x if flat else x.reshape(-1, k)  # a 2-D X goes as it is
        need = ctx.needs_input_grad
        save = need[0] or need[1] or need[2]
        slot, client = call.slot, call.client
        version = slot.ensure(weight, call.uses)
        ax, ab = _arr(x2, "x", 2), _arr(bias, "bias", 1)
        args = (ax, ab, version, call.override, call.row_scaled, save)
        try:
            r = client._forward(slot.name, slot.bname, *args)
        except Error as e:
            if e.code_number != _lib.NOT_FOUND:
                raise
            version = slot.put(weight, call.uses)  # fosd lost the weight: put it again, once
            r = client._forward(slot.name, slot.bname, ax, ab, version, *args[3:])
        if save:
            y, ctx.fos = r  # the Context is released by its finalizer when the graph (this node) is freed
            ctx.call = call
            ctx.shape = (x.shape, x.dtype)
            ctx.save_for_backward(x2, bias)
        else:
            y = r
        if not flat:
            y = y.reshape(x.shape[:-1] + (weight.shape[0],))
        return y if y.dtype == x.dtype else y.to(x.dtype)

    @staticmethod
    def backward(ctx, gy):
        xshape, xdtype = ctx.shape
        dy = gy if gy.dim() == 2 else gy.reshape(-1, gy.shape[-1])
        client = ctx.call.client
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        # a gradient autograd does not need (an input without requires_grad, a frozen weight) is
        # not computed: fosd skips its GEMM
        try:
            dx, dw, db = client.backward(ctx.fos, dy, need_dx=need_x, need_dw=need_w)
        except Error as e:
            if e.code_number != _lib.NOT_FOUND:
                raise
            # the context expired (or a second backward consumed it): recompute it from the saved
            # X and bias; autograd refuses here if X was modified in place or freed
            x2, bias = ctx.saved_tensors
            dx, dw, db = client.backward(ctx.fos, dy, x=x2, bias=bias, need_dx=need_x, need_dw=need_w)
        gx = None
        if need_x:
            gx = dx if dx.shape == xshape else dx.reshape(xshape)
            if gx.dtype != xdtype:
                gx = gx.to(xdtype)
        gw = dw if need_w else None
        gb = db if need_b and db is not None else None
        return gx, gw, gb, None


class Linear(nn.Module):
    """torch.nn.Linear through fosd (see the module comment)."""

    def __init__(self, in_features, out_features, bias=True, *, client=None, name=None, override=None,
                 weight_block="16x16", row_scaled=False, err="mae", bound=256, device=None,
                 dtype=torch.bfloat16, devices=None, replicas=0):
        super().__init__()
        w = nn.Parameter(torch.empty((out_features, in_features), device=device, dtype=dtype))
        b = nn.Parameter(torch.empty(out_features, device=device, dtype=dtype)) if bias else None
        self._setup(w, b, client, name, override, weight_block, row_scaled, err, bound, devices, replicas)
        self.reset_parameters()

    def _setup(self, weight, bias, client, name, override, weight_block, row_scaled, err, bound,
               devices=None, replicas=0):
        _check_options(override, weight_block, row_scaled, err, bound, devices, replicas)
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.weight = weight
        if bias is not None:
            self.bias = bias
        else:
            self.register_parameter("bias", None)
        self.override, self.weight_block, self.row_scaled = override, weight_block, bool(row_scaled)
        self.err, self.bound = err, bound
        self.devices = list(devices) if devices is not None else None
        self.replicas = replicas
        self._client = client
        self._auto_name = name is None
        self.name = name if name is not None else unique_name()
        self._slot = None
        self._call = None

    @classmethod
    def from_linear(cls, lin, *, client=None, name=None, **options):
        """A Linear sharing lin's weight and bias parameters (the same Parameter objects)."""
        m = cls.__new__(cls)
        nn.Module.__init__(m)
        o = dict(override=None, weight_block="16x16", row_scaled=False, err="mae", bound=256, devices=None,
                 replicas=0)
        for k, v in options.items():
            if k not in o:
                raise TypeError("from_linear: unknown option %r" % k)
            o[k] = v
        m._setup(lin.weight, lin.bias, client, name, **o)
        return m

    def reset_parameters(self):
        nn.Linear.reset_parameters(self)

    @property
    def client(self):
        return self._client if self._client is not None else _fosd.default_client()

    @property
    def puts(self):
        """How often this layer has put its weight into fosd's cache."""
        return self._slot.puts if self._slot is not None else 0

    @property
    def weight_version(self):
        """The version of the weight in fosd's cache (0 before the first forward)."""
        return self._slot.version if self._slot is not None else 0

    def _weight_slot(self):
        c = self.client
        if self._slot is None or self._slot.client is not c:
            self._slot = _WeightSlot(c, self.name, self.weight_block, self.err, self.bound,
                                     getattr(self, "devices", None), getattr(self, "replicas", 0))
        return self._slot

    def forward(self, x):
        call = self._call
        c = self._client if self._client is not None else _fosd.default_client()
        if call is None or call.client is not c or call.slot is not self._slot or \
                call.options != (self.override, self.row_scaled):
            call = self._call = _Call(c, self._weight_slot(), self.override, self.row_scaled)
        return _LinearFn.apply(x, self.weight, self.bias, call)

    def extra_repr(self):
        s = "in_features=%d, out_features=%d, bias=%s, name=%r, override=%s, weight_block=%s, " \
            "row_scaled=%s, err=%s, bound=%d" % (
                self.in_features, self.out_features, self.bias is not None, self.name,
                self.override or "default", self.weight_block, self.row_scaled, self.err, self.bound)
        if getattr(self, "devices", None) is not None:
            s += ", devices=%s" % (self.devices,)
        if getattr(self, "replicas", 0):
            s += ", replicas=%d" % self.replicas
        return s

    # a copy (deepcopy, pickle) is another layer: a fresh slot, and a fresh name unless one was
    # given; a deep copy shares the client (a Client cannot be pickled: pickle the state_dict)
    def __getstate__(self):
        s = self.__dict__.copy()
        s["_slot"] = None
        s["_call"] = None
        if s.get("_auto_name"):
            s["name"] = None
        return s

    def __setstate__(self, s):
        self.__dict__.update(s)
        self.__dict__.setdefault("_call", None)  # made again at the next forward
        if self.name is None:
            self.name = unique_name()


def _forward(x, weight, bias, call):
    # autograd casts each gradient to its input's dtype (fosd's are bf16)
    return _LinearFn.apply(x, weight, bias, call)


def linear(x, weight, bias=None, *, client=None, override=None, weight_block="16x16", row_scaled=False,
           err="mae", bound=256, devices=None, replicas=0):
    """y = x weight^T + bias through fosd, with its backward (see the module comment). fosd keeps
    weight quantized under a name tied to the weight tensor, put again when it changes and dropped
    when the tensor is garbage collected."""
    _check_options(override, weight_block, row_scaled, err, bound, devices, replicas)
    c = client if client is not None else _fosd.default_client()
    slots = weight.__dict__.setdefault("_fosd_slots", {})
    call = _Call(c, None, override, row_scaled)
    # one copy per use: calls with different overrides on one weight do not put it again in turn
    key = (id(c), weight_block, err, bound, tuple(devices) if devices is not None else None, replicas, call.uses)
    slot = slots.get(key)
    if slot is None or slot.client is not c:
        slot = slots[key] = _WeightSlot(c, unique_name(), weight_block, err, bound, devices, replicas)
    call.slot = slot
    return _forward(x, weight, bias, call)


def convert(module, *, client=None, include=None, **options):
    """Replaces every torch.nn.Linear in module (itself included) by a fosd.torch.Linear sharing its
    parameters, with options (override, weight_block, row_scaled, err, bound, devices, replicas).
    include: a function (qualified_name, linear) -> bool choosing which to replace (default: all).
    Returns the module (a new one when module itself is an nn.Linear)."""

    def want(name, m):
        return isinstance(m, nn.Linear) and (include is None or include(name, m))

    if want("", module):
        return Linear.from_linear(module, client=client, **options)
    for qual, parent in list(module.named_modules()):
        for cname, child in list(parent.named_children()):
            full = "%s.%s" % (qual, cname) if qual else cname
            if want(full, child):
                setattr(parent, cname, Linear.from_linear(child, client=client, **options))
    return module
