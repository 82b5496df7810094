"""TensorFlow Lite models (``.tflite`` flatbuffers) in.

The file is recognised by its flatbuffer identifier (``TFL3`` at byte 4), read with the
``tflite`` package (the flatbuffer schema TVM's importer uses; the optional extra
``relay_aot[tflite]``), and its inputs and outputs are named, shaped and typed from the file.

A model with quantized tensors goes through relay_aot's importer (``tflite_exact.py``), whose
int8 operators compute what TFLite's reference kernels compute, bit for bit; an operator it has
no exact form of is converted with TVM's converter for that operator, and when that operator is
a quantized one, a warning (:class:`InexactConversionWarning`) names it. A float model goes
through TVM's importer (``relay.frontend.from_tflite``). Either way ``@main`` carries the
model's output names (``output_tensor_names``), which the C API's output fields are named
after. docs/tflite.md says what is guaranteed.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import tvm
from tvm import relay

from ..errors import RelayAotError, UnsupportedError
from .model import TFLITE_DTYPES as DTYPES
from .model import ImportedModel, TensorInfo

#: The flatbuffer file identifier of TFLite's schema, at bytes 4..8 of a model file.
IDENTIFIER = b"TFL3"


def is_tflite(path: str | os.PathLike) -> bool:
    """Whether the file at ``path`` is a TFLite flatbuffer (its identifier; not its suffix)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return False
    return len(head) == 8 and head[4:8] == IDENTIFIER


def _schema():
    try:
        import tflite
    except ImportError:
        raise RelayAotError("TFLite models need the tflite package: pip install 'relay_aot[tflite]'") from None
    return tflite


def _tensor_info(subgraph, index: int) -> TensorInfo:
    tensor = subgraph.Tensors(index)
    dtype = DTYPES.get(tensor.Type())
    if dtype is None:
        raise UnsupportedError(
            f"tensor {tensor.Name().decode()!r} has TFLite type {tensor.Type()}, which relay_aot does not read"
        )
    shape = tuple(int(d) for d in tensor.ShapeAsNumpy()) if tensor.ShapeLength() else ()
    quantization = tensor.Quantization()
    scale = zero_point = None
    if quantization is not None and quantization.ScaleLength():
        scale = tuple(float(s) for s in quantization.ScaleAsNumpy())
        zero_point = tuple(int(z) for z in quantization.ZeroPointAsNumpy())
    return TensorInfo(tensor.Name().decode("utf-8", "replace"), shape, dtype, scale, zero_point, index)


class InexactConversionWarning(UserWarning):
    """Quantized operators of a TFLite model were converted with TVM's converters, whose
    results may differ from TFLite's reference kernels (the message names them)."""


def _has_quantized_tensor(subgraph) -> bool:
    for index in range(subgraph.TensorsLength()):
        quantization = subgraph.Tensors(index).Quantization()
        if quantization is not None and quantization.ScaleLength():
            return True
    return False


def read(path: str | os.PathLike, exact: bool | None = None, *, every_tensor: bool = False) -> ImportedModel:
    """The model in the TFLite file at ``path`` (:class:`~relay_aot.frontends.ImportedModel`).

    :param exact: how a model with quantized tensors is converted. ``None``: by relay_aot's
        importer, bit-exact with TFLite's reference kernels for the operators it converts, the
        others with TVM's converters (warning :class:`InexactConversionWarning` when one is
        quantized; ``ImportedModel.inexact`` lists them). ``True``: the same, but a quantized
        operator without an exact conversion is refused. ``False``: TVM's importer for the
        whole model. A model without quantized tensors (a float one) goes through TVM's
        importer whatever ``exact`` says.
    :param every_tensor: ``@main`` returns the output of every operator, in the model's order
        (a tuple; ``outputs`` describes each, with its tensor ``index``), to compare with the
        reference kernels tensor by tensor; relay_aot's importer only.
    :raises FileNotFoundError: no file at ``path``.
    :raises RelayAotError: the file is not a TFLite model, the ``tflite`` package is missing, or
        TVM's importer fails on it (the message names the operator where it says).
    :raises UnsupportedError: the model has more than one subgraph (control flow), a tensor of a
        type relay_aot does not read, an operator no importer converts; with ``exact=True``, a
        quantized operator without an exact conversion (each named); ``every_tensor`` for a
        model relay_aot's importer does not read.
    """
    path = Path(path)
    data = path.read_bytes()
    if data[4:8] != IDENTIFIER:
        raise RelayAotError(f"{path}: not a TFLite model (no {IDENTIFIER.decode()} identifier at byte 4)")
    tflite = _schema()
    from . import tflite_exact

    try:
        model = tflite.Model.GetRootAsModel(data, 0)
        subgraphs = model.SubgraphsLength()
    except Exception as err:  # noqa: BLE001 - the flatbuffer reader raises anything on a damaged file
        raise RelayAotError(f"{path}: not a readable TFLite model ({type(err).__name__}: {err})") from None
    if subgraphs != 1:
        raise UnsupportedError(f"{path}: the model has {subgraphs} subgraphs; relay_aot reads models of one")
    subgraph = model.Subgraphs(0)
    try:
        quantized = _has_quantized_tensor(subgraph)
        graph = tflite_exact.parse(data) if quantized and exact is not False else None
    except UnsupportedError as err:
        raise UnsupportedError(f"{path}: {err}") from None
    except Exception as err:  # noqa: BLE001 - as above
        raise RelayAotError(f"{path}: not a readable TFLite model ({type(err).__name__}: {err})") from None
    if graph is not None:
        try:
            imported = tflite_exact.convert(graph, every_tensor=every_tensor, exact=bool(exact))
        except UnsupportedError as err:
            raise UnsupportedError(f"{path}: {err}") from None
        if imported.inexact:
            warnings.warn(
                f"{path}: {len(imported.inexact)} quantized operator(s) converted with TVM's converters, whose "
                "results may differ from TFLite's reference kernels: " + "; ".join(imported.inexact),
                InexactConversionWarning,
                stacklevel=2,
            )
        return imported
    if every_tensor:
        why = "exact=False" if exact is False else "the model has no quantized tensor"
        raise UnsupportedError(f"{path}: every_tensor needs relay_aot's importer, which {why} leaves to TVM's")
    return _read_with_tvm(path, model, subgraph)


def _read_with_tvm(path: Path, model, subgraph) -> ImportedModel:
    inputs = tuple(_tensor_info(subgraph, int(i)) for i in subgraph.InputsAsNumpy())
    outputs = tuple(_tensor_info(subgraph, int(i)) for i in subgraph.OutputsAsNumpy())
    shapes = {t.name: list(t.shape) for t in inputs}
    dtypes = {t.name: t.dtype for t in inputs}
    try:
        mod, params = relay.frontend.from_tflite(model, shape_dict=shapes, dtype_dict=dtypes)
    except Exception as err:  # noqa: BLE001 - TVM's importer raises anything, from asserts to KeyError
        lines = [line for line in str(err).splitlines() if line.strip()]
        raise RelayAotError(
            f"{path}: TVM's TFLite importer failed: {type(err).__name__}: {lines[-1] if lines else ''}"
        ) from None
    params = {
        name: value.numpy() if isinstance(value, tvm.nd.NDArray) else np.asarray(value)
        for name, value in params.items()
    }
    return ImportedModel(mod, params, inputs, outputs, "tvm")
