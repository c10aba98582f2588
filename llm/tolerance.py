"""How closely two ways of computing the same logits can be expected to agree.

Checks such as rl's shared-prompt cache (rl/grpo.py) and sft's split output layer
(sft/trainer.py) compare a fast path with a plain forward pass. The two paths run
different kernels (a decode matvec against a prompt matmul, say), so they agree only
to the precision those kernels keep, which depends on the weights' dtype and on the
device: on an H100 with float32 weights the shared-prompt cache differed from the plain
pass by up to 0.0065 at log-probs of about -23, because CUDA runs float32 matmuls in
TF32 while the decode matvec stays in full float32. A fixed 1e-4 refused that model.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

# (rtol, atol): a few roundings of the precision each case keeps.
_HALF = {
    mx.bfloat16: (3e-2, 3e-2),  # 7-bit mantissa: 2^-7 = 8e-3 relative per rounding
    mx.float16: (4e-3, 4e-3),  # 10-bit mantissa: 2^-10 = 1e-3 relative per rounding
}
_FLOAT32_GPU = (2e-3, 1e-3)  # TF32 matmuls, 10-bit mantissa: 1e-3 relative; 0.0065 at |x|=23 passes 7x over
_FLOAT32_CPU = (1e-5, 1e-4)  # the same float32 kernels on both paths: only summation order differs


def logit_tolerance(dtype: mx.Dtype, device: mx.Device | None = None) -> tuple[float, float]:
    """(rtol, atol) within which two computations of the same logits or log-probs agree.

    Half-precision weights round every activation to their own mantissa (bfloat16 keeps
    7 bits, 2^-7 = 8e-3 relative; float16 10 bits, 1e-3) on any device. Float32 weights
    depend on the device (`mx.default_device()` when not given): a GPU runs float32
    matmuls in TF32 (a 10-bit mantissa, 1e-3 relative) but not matvecs, so paths that
    differ in shape differ by that much; a CPU computes both paths in full float32 and
    stays tight, so a check there still catches small errors.
    """
    if dtype in _HALF:
        return _HALF[dtype]
    device = mx.default_device() if device is None else device
    return _FLOAT32_GPU if device.type == mx.gpu else _FLOAT32_CPU


def weight_dtype(model: nn.Module) -> mx.Dtype:
    """The least precise floating dtype among the model's parameters (float32 if it has none).

    The least precise one sets how far two paths through the model can drift: a bfloat16
    base with float32 LoRA weights computes in bfloat16. Quantized weights are integers;
    their scales carry the dtype the layer computes in.
    """
    dtypes = {p.dtype for _, p in tree_flatten(model.parameters()) if mx.issubdtype(p.dtype, mx.floating)}
    return max(dtypes, key=lambda d: mx.finfo(d).eps, default=mx.float32)
