"""Model files in: what a model file holds, as a Relay module relay_aot compiles.

A frontend reads a file into an :class:`ImportedModel`: the module, the parameters it binds
(weights), and the model's own names, shapes, dtypes (and quantization) of its inputs and
outputs, which the C API's fields are named after, as TVM's AOT executor names them.
``tflite.py`` reads TensorFlow Lite flatbuffers (``tflite_exact.py`` converts their int8
operators bit-exactly); ONNX files go through TVM's importer in the
command line (``relay_aot/cli``).
"""

from __future__ import annotations

from .model import ImportedModel, TensorInfo

__all__ = ["ImportedModel", "TensorInfo", "read_tflite"]


def read_tflite(path, exact: bool | None = None, *, every_tensor: bool = False) -> ImportedModel:
    """Read a TensorFlow Lite model (``.tflite``) into Relay.

    A model with quantized tensors goes through relay_aot's importer, whose int8 operators are
    bit-exact with TFLite's reference kernels (docs/tflite.md lists them); ``exact=True``
    refuses a quantized operator it cannot convert exactly (by default TVM's converter takes it,
    with a warning), ``exact=False`` uses TVM's importer for the whole model, as a float model
    always does. ``every_tensor=True`` returns every operator's output, for checking a model
    tensor by tensor. See :func:`relay_aot.frontends.tflite.read`.
    """
    from . import tflite

    return tflite.read(path, exact, every_tensor=every_tensor)
