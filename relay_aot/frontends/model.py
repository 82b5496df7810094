"""What a frontend makes of a model file: the module, its parameters, its inputs and outputs."""

from __future__ import annotations

import dataclasses

import numpy as np
import tvm

#: TFLite's TensorType enumeration (schema.fbs) -> numpy dtype names (read by ``tflite.py`` and
#: ``tflite_exact.py``; here, so that the exact importer need not import the module that calls it).
TFLITE_DTYPES = {
    0: "float32",
    1: "float16",
    2: "int32",
    3: "uint8",
    4: "int64",
    6: "bool",
    7: "int16",
    9: "int8",
    10: "float64",
    11: "complex128",
    12: "uint64",
    15: "uint32",
    16: "uint16",
}


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """An input or output of a model, as the model file names and types it."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    #: per-tensor or per-channel quantization of an integer tensor (None for float ones)
    scale: tuple[float, ...] | None = None
    zero_point: tuple[int, ...] | None = None
    #: its position among the model's tensors, where the file numbers them (TFLite: the index
    #: LiteRT's ``Interpreter.get_tensor`` takes)
    index: int | None = None


@dataclasses.dataclass
class ImportedModel:
    """A model file read into Relay: ``relay_aot.compile(model.mod, params=model.params)``."""

    mod: tvm.IRModule
    params: dict[str, np.ndarray]
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    #: which importer made ``mod``: "exact" (relay_aot's, bit-exact with TFLite's reference
    #: kernels for the operators it converts; docs/tflite.md) or "tvm" (TVM's)
    importer: str = "tvm"
    #: the quantized operators the "exact" importer converted with TVM's converter instead,
    #: whose results may differ from the reference kernels' (``"MEAN (operator 3): why"``)
    inexact: tuple[str, ...] = ()
