"""The [tools] section of the settings: what the model's tools may do and where the profilers are.
Declared beside the tools that read it, as eval/settings.py is beside the evaluator; settings.py
composes the sections."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.flags import Flag


class ToolSettings(BaseModel):
    """What the model's tools may do and where the profilers are."""

    model_config = ConfigDict(extra="forbid")

    allow_shell: Annotated[bool, Flag(sets=True)] = Field(
        False, description=("Give the model a shell tool, in the jail (the workspace writable).")
    )
    shell_timeout_s: float = Field(60.0, gt=0)  # the default and the most one shell call may ask for
    ncu_path: Path | None = None  # default: next to nvcc, PATH, then Nsight Compute's own folders
    sanitizer_path: Path | None = None
    profile_timeout_s: float = Field(300.0, gt=0)  # ncu replays each kernel once per pass
    sanitize_timeout_s: float = Field(300.0, gt=0)  # racecheck and initcheck slow every access down
    gpu_name: str | None = None  # which datasheet row the roofline uses; default: GPU 0's name (NVML)
    # datasheet peaks for a GPU the roofline does not know (all three), or to correct one
    peak_fp32_tflops: float | None = Field(None, gt=0)
    peak_tensor_tflops: float | None = Field(None, gt=0)
    peak_hbm_tbps: float | None = Field(None, gt=0)
