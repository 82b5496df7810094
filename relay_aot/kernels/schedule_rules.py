"""Schedules relay_aot picks by shape where TVM's untuned fallback is weak.

Without tuning records TVM schedules a kernel with its template's fallback configuration. For
x86's packed matrix product (``dense_pack.x86``, what ``nn.dense`` with constant weights
becomes) that fallback is one fixed rule: 16 or 32 columns and 8 rows per register block, the
whole reduction in one loop. On AVX2, with 16 vector registers, 8 rows by 2 vectors is 16
accumulators: every register, so the block spills and the product runs at a third of the
machine's speed (an ONNX MLP 784-512-512-10 at batch 64: 3.3 ms where onnxruntime takes 1.1).

:class:`ShapeRules` is an AutoTVM dispatch context that answers, for the templates it has a
rule for, with a configuration chosen by the shapes and the target's vector registers; every
other query, and any workload the enclosing contexts have a tuning record for, goes where it
went before. Tuned records always win: the rule's configurations cost infinity in TVM's
comparison. ``kernels.tuning.watch`` enters it wherever relay_aot asks AutoTVM, so layout
passes (which choose the packed weight layout from the same configuration) and kernel lowering
agree. The rule is part of relay_aot's sources, which every cache key covers.
"""

from __future__ import annotations

from typing import Callable, Optional

import tvm
from tvm import autotvm
from tvm.autotvm.task.space import ConfigEntity, SplitEntity

#: The templates with a rule here, by AutoTVM task name.
RULES = ("dense_pack.x86",)


def _const_ints(shape) -> Optional[list[int]]:
    if not all(isinstance(d, (int, tvm.tir.IntImm)) for d in shape):
        return None
    return [int(d) for d in shape]


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def dense_pack_blocking(m: int, n: int, lanes: int, registers: int, columns: Optional[int] = None) -> tuple[int, int]:
    """Rows and columns of the register block of an ``m`` x ``n`` packed product.

    The accumulators (rows x vectors per row) fill at most half of the vector registers: the
    rest hold the weight vectors loaded and the broadcast inputs. Among the blocks that use the
    most accumulators within that budget, the one two vectors wide (measured on AVX2: 4 x 16
    beats 2 x 32 by 0-10% and 8 x 8 by 2x), then the one loading the fewest values per
    multiply-add. ``columns``: the packing is fixed already (the weight was packed to it).
    """
    budget = registers // 2
    candidates = []
    column_options = [columns] if columns else [c for c in _divisors(n, 4 * lanes) if c % lanes == 0] or [max(_divisors(n, 2 * lanes))]
    for cols in column_options:
        vectors = -(-cols // lanes)
        for rows in _divisors(m, 8):
            accumulators = rows * vectors
            if accumulators > budget and rows > 1:
                continue
            loads_per_fma = (rows + vectors) / accumulators
            candidates.append((-accumulators, abs(vectors - 2), loads_per_fma, cols, rows))
    *_, cols, rows = min(candidates)
    return rows, cols


def _dense_pack_config(workload, target: tvm.target.Target) -> Optional[ConfigEntity]:
    # workload: ("dense_pack.x86", data, weight, bias, out_dtype), tensors as ("TENSOR", shape, dtype)
    data, weight = workload[1], workload[2]
    data_shape, weight_shape = _const_ints(data[1]), _const_ints(weight[1])
    if data_shape is None or weight_shape is None or data[2] != "float32":
        return None
    m, k = data_shape
    if len(weight_shape) == 3:  # packed already: (n / columns, k, columns)
        columns = weight_shape[2]
        n = weight_shape[0] * columns
    else:
        columns, n = None, weight_shape[0]
    with target:
        lanes = tvm.target.x86.get_simd_32bit_lanes()
    registers = 32 if lanes == 16 else 16
    rows, cols = dense_pack_blocking(m, n, lanes, registers, columns)
    config = ConfigEntity(-1, None, {
        "tile_y": SplitEntity([m // rows, 1, rows]),
        "tile_x": SplitEntity([n // cols, 1, cols]),
        "tile_k": SplitEntity([k, 1]),
        "tile_inner": SplitEntity([m // rows, rows]),
    }, [])
    config.cost = float("inf")
    return config


class ShapeRules(autotvm.task.DispatchContext):
    """AutoTVM's answers, with relay_aot's rule where they would be a fallback configuration."""

    def __init__(self, untuned: Optional[Callable[[tuple], None]] = None) -> None:
        """``untuned(workload)`` is called whenever a rule answers: the kernel still has no
        tuning record (and tuning may beat the rule)."""
        super().__init__()
        self.memory: dict = {}
        self.ruled: set = set()
        self.untuned = untuned

    def _query_inside(self, target, workload):
        key = (str(target), workload)
        if key not in self.memory:
            # A tuning record (or an explicit configuration) in an enclosing context comes first.
            answer = self._old_ctx.query(target, workload)
            if getattr(answer, "is_fallback", False) and workload and workload[0] in RULES:
                ruled = _dense_pack_config(workload, tvm.target.Target(target))
                if ruled is not None:
                    answer = ruled
                    self.ruled.add(key)
            self.memory[key] = answer
        if key in self.ruled and self.untuned is not None:
            self.untuned(workload)
        return self.memory[key]

    def update(self, target, workload, cfg):
        self.memory[(str(target), workload)] = cfg
