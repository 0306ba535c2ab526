"""How close is close enough: per-dtype tolerances and the precision-downgrade budget.

The numbers only parameterise the gate in compare.py; docs/correctness.md says how they
are used. Kept apart so config files and the CLI can carry a `Tolerances` as plain data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # settings import this module: torch stays out of the CLI's start-up
    import torch


class DtypeTol(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    rtol: float = Field(ge=0)
    atol: float = Field(ge=0)


# Field names of Tolerances that carry a float dtype's tolerance, by torch's dtype name.
_FIELD_FOR_DTYPE: dict[str, str] = {
    "float32": "float32",
    "complex64": "float32",  # compared as pairs of float32
    "float16": "float16",
    "complex32": "float16",
    "bfloat16": "bfloat16",
    "float64": "float64",
    "complex128": "float64",
}


def _field(dtype: torch.dtype) -> str | None:
    return _FIELD_FOR_DTYPE.get(str(dtype).removeprefix("torch."))


Preset = Literal["kernelbench", "cuda-agent"]


class Tolerances(BaseModel):
    """Tolerances per dtype plus the precision settings of an fp32 task.

    Defaults follow KernelBench for fp32 (1e-4); integer and bool outputs are always exact.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    float32: DtypeTol = DtypeTol(rtol=1e-4, atol=1e-4)
    float16: DtypeTol = DtypeTol(rtol=1e-2, atol=1e-2)
    bfloat16: DtypeTol = DtypeTol(rtol=1e-2, atol=1e-2)
    float64: DtypeTol = DtypeTol(rtol=1e-7, atol=1e-7)
    # Normwise relative error against the float64 truth above which an fp32 task's output
    # counts as a precision downgrade. fp32 arithmetic lands near 1e-7..1e-6; tf32 (10-bit
    # mantissa) near 1e-4..1e-3 and fp16 near 1e-4..1e-3, so 5e-5 sits between them.
    precision_budget: float = Field(default=5e-5, gt=0)
    # How many times the fp32 reference's own error (vs float64) a candidate may make:
    # widens the elementwise gate and the precision budget for ill-conditioned tasks.
    ref_error_factor: float = Field(default=16.0, ge=0)
    # The downgrade signature (precision.py): a share of the error along the TF32 rounding's own
    # error at least this large, `downgrade_z` standard errors from 0, is a downgrade. Honest fp32
    # gives |share| < 0.01 and |z| < 3; TF32/fp16 operands share 1 (one operand: 0.5) at z > 60
    # on a 128x128 output (z grows with the square root of the output's size).
    downgrade_share: float = Field(default=0.1, gt=0)
    downgrade_z: float = Field(default=6.0, gt=0)

    @classmethod
    def preset(cls, name: Preset) -> Tolerances:
        if name == "kernelbench":
            return cls()
        if name == "cuda-agent":  # CUDA Agent's verify script: 1e-2 whatever the dtype
            loose = DtypeTol(rtol=1e-2, atol=1e-2)
            return cls(float32=loose, float16=loose, bfloat16=loose, float64=loose)
        raise ValueError(f"unknown tolerance preset {name!r}; use 'kernelbench' or 'cuda-agent'")

    def for_dtype(self, dtype: torch.dtype) -> tuple[float, float]:
        """(rtol, atol) for an output of this dtype; (0, 0) means exact."""
        if not (dtype.is_floating_point or dtype.is_complex):
            return 0.0, 0.0  # integers and bool: exact
        field = _field(dtype)
        if field is None:  # float8 and friends: no sensible default, make the user choose
            raise ValueError(f"no tolerance for {dtype}; set one explicitly")
        tol: DtypeTol = getattr(self, field)
        return tol.rtol, tol.atol

    def with_atol(self, dtype: torch.dtype, atol: float) -> Tolerances:
        """A copy whose atol for `dtype` is replaced (the zero-trap tightening uses this)."""
        field = _field(dtype)
        if field is None:
            raise ValueError(f"{dtype} has no adjustable tolerance")
        rtol, _ = self.for_dtype(dtype)
        return self.model_copy(update={field: DtypeTol(rtol=rtol, atol=atol)})


def for_dtype(dtype: torch.dtype, tol: Tolerances | None = None) -> tuple[float, float]:
    """(rtol, atol) for `dtype` under `tol` (the KernelBench defaults when None)."""
    return (tol or Tolerances()).for_dtype(dtype)
