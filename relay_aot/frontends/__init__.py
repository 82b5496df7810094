"""Model files in: what a model file holds, as a Relay module relay_aot compiles.

A frontend reads a file into an :class:`ImportedModel`: the module, the parameters it binds
(weights), and the model's own names, shapes, dtypes (and quantization) of its inputs and
outputs, which the C API's fields are named after, as TVM's AOT executor names them.
``tflite.py`` reads TensorFlow Lite flatbuffers; ONNX files go through TVM's importer in the
command line (``relay_aot/cli``).
"""

from __future__ import annotations

from .model import ImportedModel, TensorInfo

__all__ = ["ImportedModel", "TensorInfo", "read_tflite"]


def read_tflite(path, exact: bool | None = None) -> ImportedModel:
    """Read a TensorFlow Lite model (``.tflite``) into Relay (see :mod:`relay_aot.frontends.tflite`)."""
    from . import tflite

    return tflite.read(path, exact)
