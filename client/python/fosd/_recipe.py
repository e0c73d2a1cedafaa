"""fosd.Recipe: the numerics options of a fosd linear layer as one frozen, hashable, comparable
value (fosd.torch.Linear, fosd.torch.convert). Invariants: every field holds one canonical value
(strings lower case, override None spelled "default", row_scaled a bool), checked when the recipe
is made, so two recipes that ask for the same numerics are equal and hash alike."""

from dataclasses import dataclass, fields, replace
from typing import Any, Optional

from . import _lib
from ._errors import Error

__all__ = ["Recipe"]

OVERRIDES = ("default", "quantized", "high_precision", "dequantized")
WEIGHT_BLOCKS = ("16x16", "1x16")
ERRS = ("mae", "mse")
BOUNDS = (256, 448)
FOUR_OVER_SIX = ("all", "weights", "activations", "none")


def _pick(field: str, value: Any, allowed: tuple) -> Any:
    v = value.lower() if isinstance(value, str) else value
    if v not in allowed or isinstance(v, bool):
        raise Error(_lib.INVALID_ARGUMENT, "%s: %r is not one of %s" % (field, value, ", ".join(map(repr, allowed))))
    return v


@dataclass(frozen=True)
class Recipe:
    """How fosd quantizes and computes a linear layer (NUMERICS.md; PROTOCOL.md for the options).

    override: the backward's form of the operands, "default" (fosd picks: "quantized", or
        "high_precision" with row_scaled), "quantized", "high_precision" or "dequantized"; None
        means "default".
    weight_block: the weight's scale block, "16x16" (the default) or "1x16".
    row_scaled: X scaled per row (an amax per row of X) instead of one per tensor; cannot be used
        with override "quantized" (row-scaled X has no columnwise copy).
    err: how four-over-six picks a block's scale, "mae" (the default) or "mse".
    bound: the scale bound, 256 (the default) or 448.
    four_over_six: which operands use four-over-six, "all" (the default), "weights",
        "activations" or "none" (plain NVFP4 for the others).

    Bad values raise fosd.Error INVALID_ARGUMENT naming the field, the value and the choices.
    recipe.replace(err="mse") is a copy with some fields changed."""

    override: Optional[str] = "default"
    weight_block: str = "16x16"
    row_scaled: bool = False
    err: str = "mae"
    bound: int = 256
    four_over_six: str = "all"

    def __post_init__(self) -> None:
        ovr = "default" if self.override is None else self.override
        set_ = object.__setattr__  # frozen: the canonical values are stored once, here
        set_(self, "override", _pick("override", ovr, OVERRIDES))
        set_(self, "weight_block", _pick("weight_block", self.weight_block, WEIGHT_BLOCKS))
        if not isinstance(self.row_scaled, (bool, int)) or self.row_scaled not in (0, 1):
            raise Error(_lib.INVALID_ARGUMENT, "row_scaled: %r is not True or False" % (self.row_scaled,))
        set_(self, "row_scaled", bool(self.row_scaled))
        set_(self, "err", _pick("err", self.err, ERRS))
        if self.bound not in BOUNDS or isinstance(self.bound, bool):
            raise Error(_lib.INVALID_ARGUMENT, "bound: %r is not 256 or 448" % (self.bound,))
        set_(self, "bound", int(self.bound))
        set_(self, "four_over_six", _pick("four_over_six", self.four_over_six, FOUR_OVER_SIX))
        if self.row_scaled and self.override == "quantized":
            raise Error(_lib.INVALID_ARGUMENT, "override 'quantized' cannot be used with row_scaled "
                        "(row-scaled X has no columnwise copy): use override 'default' or 'high_precision'")

    def replace(self, **changes: Any) -> "Recipe":
        """A copy with the given fields changed (checked as a new recipe)."""
        names = {f.name for f in fields(self)}
        for k in changes:
            if k not in names:
                raise TypeError("Recipe has no field %r (fields: %s)" % (k, ", ".join(sorted(names))))
        return replace(self, **changes)

    @property
    def wire_override(self) -> Optional[str]:
        """override as the Client calls take it (None for "default")."""
        return None if self.override == "default" else self.override
