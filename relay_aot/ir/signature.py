"""The program description embedded in every compiled library (its signature).

A library exports ``<model>__metadata``, returning this JSON text: the entry function's
parameter names and types, its result type, the ADT definitions those types mention, and what
its kernels need of the CPU (``cpu``: the target and its features, see ``relay_aot/cpu.py``), and
the axes of its parameters that share a named dimension (``shared_extents``, when there are any).
``relay_aot.load`` reads it to convert and check arguments without the Relay program.
"""

from __future__ import annotations

import json
from typing import Any

from ..cpu import CpuRequirement
from . import nodes as ir

FORMAT_VERSION = 1

_TO_JSON = {
    ir.TensorType: lambda t: ["tensor", list(t.shape), t.dtype],
    ir.TupleType: lambda t: ["tuple", [type_to_json(f) for f in t.fields]],
    ir.AdtType: lambda t: ["adt", t.adt, [type_to_json(a) for a in t.args]],
    ir.FuncType: lambda t: ["func", [type_to_json(p) for p in t.params], type_to_json(t.ret)],
    ir.RefType: lambda t: ["ref", type_to_json(t.value)],
    ir.AnyType: lambda t: ["any"],
    ir.TypeParam: lambda t: ["param", t.index],
}

_FROM_JSON = {
    "tensor": lambda d: ir.TensorType(tuple(d[1]), d[2]),
    "tuple": lambda d: ir.TupleType(tuple(type_from_json(f) for f in d[1])),
    "adt": lambda d: ir.AdtType(d[1], tuple(type_from_json(a) for a in d[2])),
    "func": lambda d: ir.FuncType(tuple(type_from_json(p) for p in d[1]), type_from_json(d[2])),
    "ref": lambda d: ir.RefType(type_from_json(d[1])),
    "any": lambda d: ir.AnyType(),
    "param": lambda d: ir.TypeParam(d[1]),
}


def type_to_json(ty: ir.Type) -> Any:
    """A JSON-able description of ``ty``."""
    return _TO_JSON[type(ty)](ty)


def type_from_json(data: Any) -> ir.Type:
    """The type described by ``data`` (see :func:`type_to_json`)."""
    return _FROM_JSON[data[0]](data)


class Signature:
    """What callers of a compiled program need: parameters, result type and ADT definitions."""

    def __init__(
        self,
        model: str,
        params: list[ir.Param],
        ret: ir.Type,
        adts: list[ir.AdtDef],
        cpu: CpuRequirement | None = None,
        shared_extents: tuple[ir.SharedExtent, ...] = (),
        output_names: tuple[str, ...] = (),
    ):
        self.model = model
        self.params = params
        self.ret = ret
        self.adts = adts
        self.cpu = cpu  #: what the kernels need of the CPU (None: a library from before it was recorded)
        self.shared_extents = shared_extents  #: axes of the parameters that must agree (see ir.SharedExtent)
        self.output_names = output_names  #: the model's names of the result's tensors (ir.Program.output_names)

    @classmethod
    def of_program(cls, program: ir.Program, model: str) -> Signature:
        """The signature of a lowered program."""
        return cls(
            model, program.params, program.ret, program.adts, program.cpu, program.shared_extents, program.output_names
        )

    def to_json(self) -> str:
        """The signature as JSON text."""
        return json.dumps(
            {
                "format": FORMAT_VERSION,
                "model": self.model,
                "params": [{"name": p.name, "type": type_to_json(p.type)} for p in self.params],
                "ret": type_to_json(self.ret),
                "adts": [
                    {
                        "name": adt.name,
                        "num_params": adt.num_params,
                        "ctors": [
                            {"name": c.name, "tag": c.tag, "fields": [type_to_json(f) for f in c.fields]}
                            for c in adt.ctors
                        ],
                    }
                    for adt in self.adts
                ],
                **({"cpu": self.cpu.to_json()} if self.cpu is not None else {}),
                **({"output_names": list(self.output_names)} if self.output_names else {}),
                **(
                    {
                        "shared_extents": [
                            [e.name, [[a.param, list(a.path), a.axis] for a in e.axes]] for e in self.shared_extents
                        ]
                    }
                    if self.shared_extents
                    else {}
                ),
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> Signature:
        """Parse the text :meth:`to_json` wrote."""
        data = json.loads(text)
        if data.get("format") != FORMAT_VERSION:
            raise ValueError(f"unsupported relay_aot metadata format {data.get('format')!r}")
        adts = [
            ir.AdtDef(
                a["name"],
                a["num_params"],
                tuple(
                    ir.CtorDef(c["name"], c["tag"], tuple(type_from_json(f) for f in c["fields"])) for c in a["ctors"]
                ),
            )
            for a in data["adts"]
        ]
        params = [ir.Param(p["name"], type_from_json(p["type"])) for p in data["params"]]
        shared = tuple(
            ir.SharedExtent(name, tuple(ir.Axis(p, tuple(path), axis) for p, path, axis in axes))
            for name, axes in data.get("shared_extents", [])
        )
        return cls(
            data["model"],
            params,
            type_from_json(data["ret"]),
            adts,
            CpuRequirement.from_json(data.get("cpu")),
            shared,
            tuple(str(n) for n in data.get("output_names", ())),
        )
