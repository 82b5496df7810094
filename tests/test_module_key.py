"""The module key is exact: look-alike modules never share a cache entry, settings are in the key.

``mod.astext()`` prints floats with 6 significant digits; keying on it made two modules that
differ only past the sixth digit share a library (the second compile ran the first program).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tvm
from tvm import relay

import relay_aot
from relay_aot import builder, config, passes


def _module(body_of, shape=(1, 2, 4, 4), dtype="float32"):
    x = relay.var("x", shape=shape, dtype=dtype)
    return tvm.IRModule.from_expr(relay.Function([x], body_of(x)))


#: (attrs type key, field, builder(x, value)): every float-valued attribute of Relay's operators
#: (see test_the_list_covers_every_float_attribute_tvm_registers).
FLOAT_ATTRIBUTES = [
    ("relay.attrs.ClipAttrs", "a_min", lambda x, v: relay.clip(x, v, 1e9)),
    ("relay.attrs.ClipAttrs", "a_max", lambda x, v: relay.clip(x, -1e9, v)),
    ("relay.attrs.LeakyReluAttrs", "alpha", lambda x, v: relay.nn.leaky_relu(x, v)),
    (
        "relay.attrs.LayerNormAttrs",
        "epsilon",
        lambda x, v: relay.nn.layer_norm(
            x, relay.const(np.ones(4, "float32")), relay.const(np.zeros(4, "float32")), epsilon=v
        ),
    ),
    (
        "relay.attrs.InstanceNormAttrs",
        "epsilon",
        lambda x, v: relay.nn.instance_norm(
            x, relay.const(np.ones(2, "float32")), relay.const(np.zeros(2, "float32")), epsilon=v
        ),
    ),
    (
        "relay.attrs.GroupNormAttrs",
        "epsilon",
        lambda x, v: relay.nn.group_norm(
            x, relay.const(np.ones(2, "float32")), relay.const(np.zeros(2, "float32")), 1, epsilon=v
        ),
    ),
    (
        "relay.attrs.BatchNormAttrs",
        "epsilon",
        lambda x, v: relay.nn.batch_norm(x, *[relay.const(np.ones(2, "float32"))] * 4, epsilon=v)[0],
    ),
    ("relay.attrs.LRNAttrs", "alpha", lambda x, v: relay.nn.lrn(x, alpha=v)),
    ("relay.attrs.LRNAttrs", "beta", lambda x, v: relay.nn.lrn(x, beta=v)),
    ("relay.attrs.LRNAttrs", "bias", lambda x, v: relay.nn.lrn(x, bias=v)),
    ("relay.attrs.DropoutAttrs", "rate", lambda x, v: relay.nn.dropout(x, rate=v)),
    ("relay.attrs.L2NormalizeAttrs", "eps", lambda x, v: relay.nn.l2_normalize(x, v)),
    (
        "relay.attrs.Resize1DAttrs",
        "cubic_alpha",
        lambda x, v: relay.image.resize1d(relay.reshape(x, (2, 2, 8)), (16,), method="cubic", cubic_alpha=v),
    ),
    (
        "relay.attrs.Resize1DAttrs",
        "extrapolation_value",
        lambda x, v: relay.image.resize1d(relay.reshape(x, (2, 2, 8)), (16,), extrapolation_value=v),
    ),
    (
        "relay.attrs.Resize2DAttrs",
        "cubic_alpha",
        lambda x, v: relay.image.resize2d(x, (8, 8), method="cubic", cubic_alpha=v),
    ),
    (
        "relay.attrs.Resize2DAttrs",
        "extrapolation_value",
        lambda x, v: relay.image.resize2d(x, (8, 8), extrapolation_value=v),
    ),
    (
        "relay.attrs.Resize3DAttrs",
        "cubic_alpha",
        lambda x, v: relay.image.resize3d(relay.reshape(x, (1, 2, 2, 2, 4)), (4, 4, 8), method="cubic", cubic_alpha=v),
    ),
    (
        "relay.attrs.Resize3DAttrs",
        "extrapolation_value",
        lambda x, v: relay.image.resize3d(relay.reshape(x, (1, 2, 2, 2, 4)), (4, 4, 8), extrapolation_value=v),
    ),
    (
        "relay.attrs.CropAndResizeAttrs",
        "extrapolation_value",
        lambda x, v: relay.image.crop_and_resize(
            x,
            relay.const(np.array([[0, 0, 1, 1]], "float32")),
            relay.const(np.array([0], "int32")),
            (2, 2),
            "NCHW",
            extrapolation_value=v,
        ),
    ),
    (
        "relay.attrs.SequenceMaskAttrs",
        "mask_value",
        lambda x, v: relay.sequence_mask(
            relay.reshape(x, (8, 4)), relay.const(np.array([1, 2, 3, 4], "int32")), mask_value=v
        ),
    ),
    ("relay.attrs.UpSamplingAttrs", "scale_h", lambda x, v: relay.nn.upsampling(x, scale_h=v, scale_w=2.0)),
    ("relay.attrs.UpSamplingAttrs", "scale_w", lambda x, v: relay.nn.upsampling(x, scale_h=2.0, scale_w=v)),
    (
        "relay.attrs.UpSampling3DAttrs",
        "scale_d",
        lambda x, v: relay.nn.upsampling3d(relay.reshape(x, (1, 2, 2, 2, 4)), scale_d=v, scale_h=2.0, scale_w=2.0),
    ),
    ("relay.attrs.MultiBoxPriorAttrs", "sizes", lambda x, v: relay.vision.multibox_prior(x, sizes=(v,))),
    ("relay.attrs.MultiBoxPriorAttrs", "ratios", lambda x, v: relay.vision.multibox_prior(x, ratios=(v,))),
    ("relay.attrs.MultiBoxPriorAttrs", "steps", lambda x, v: relay.vision.multibox_prior(x, steps=(v, v))),
    ("relay.attrs.MultiBoxPriorAttrs", "offsets", lambda x, v: relay.vision.multibox_prior(x, offsets=(v, v))),
    (
        "relay.attrs.MultiBoxTransformLocAttrs",
        "threshold",
        lambda x, v: relay.vision.multibox_transform_loc(x, x, x, threshold=v)[0],
    ),
    (
        "relay.attrs.MultiBoxTransformLocAttrs",
        "variances",
        lambda x, v: relay.vision.multibox_transform_loc(x, x, x, variances=(v, 0.1, 0.2, 0.2))[0],
    ),
]

#: Two values that print alike with 6 significant digits.
A, B = 0.12345671, 0.12345674


def _float_fields(type_key: str) -> set[str]:
    try:
        infos = tvm.ir.make_node(type_key).list_field_info()
    except (tvm.error.TVMError, AttributeError):
        return set()  # needs required fields to be built: covered by hand in FLOAT_ATTRIBUTES
    return {
        f.name
        for f in infos
        if f.type_info.split(",")[0] in ("double", "float", "FloatImm") or "T.float" in f.type_info
    }


def test_the_list_covers_every_float_attribute_tvm_registers():
    registered = set()
    for name in tvm.ir.Op.list_op_names():
        key = tvm.ir.Op.get(name).attrs_type_key
        if key and key.startswith("relay."):
            registered |= {(key, field) for field in _float_fields(key)}
    covered = {(key, field) for key, field, _ in FLOAT_ATTRIBUTES}
    assert registered, "found no float attributes: the registry query is broken"
    assert registered <= covered, f"float attributes without a look-alike test: {sorted(registered - covered)}"


@pytest.mark.parametrize(
    "type_key,field,make", FLOAT_ATTRIBUTES, ids=[f"{k.split('.')[-1]}.{f}" for k, f, _ in FLOAT_ATTRIBUTES]
)
def test_attributes_differing_past_six_digits_have_different_keys(type_key, field, make):
    first, second = _module(lambda x: make(x, A)), _module(lambda x: make(x, B))
    assert first.astext() == second.astext(), "the pair is not a look-alike"
    assert passes.module_fingerprint(first) != passes.module_fingerprint(second)
    assert passes.module_fingerprint(first) == passes.module_fingerprint(_module(lambda x: make(x, A)))


def _const_module(value) -> tvm.IRModule:
    x = relay.var("x", shape=np.shape(value), dtype=np.asarray(value).dtype.name)
    return tvm.IRModule.from_expr(relay.Function([x], relay.add(x, relay.const(value, dtype=x.type_annotation.dtype))))


LOOKALIKE_PROGRAMS = [
    ("float32 constant", lambda v: _const_module(np.array(v, "float32")), 1.0000012, 1.0000047),
    ("float64 constant", lambda v: _const_module(np.array(v, "float64")), 2.00000000001, 2.00000000004),
    ("tensor constant, one element", lambda v: _const_module(np.array([1.0, 2.0, v, 4.0], "float32")), 3.0, 3.5),
    ("clip a_max", lambda v: _module(lambda x: relay.clip(x, 0.0, v), shape=(4,)), 12345.61, 12345.64),
    ("leaky_relu alpha", lambda v: _module(lambda x: relay.nn.leaky_relu(x, v), shape=(4,)), 0.1000001, 0.1000009),
]


@pytest.mark.parametrize("what,make,a,b", LOOKALIKE_PROGRAMS, ids=[p[0] for p in LOOKALIKE_PROGRAMS])
def test_compiling_a_look_alike_runs_its_own_program(what, make, a, b):
    first, second = make(a), make(b)
    param = first["main"].params[0].type_annotation
    x = (
        np.linspace(-3, 20000, int(np.prod([int(d) for d in param.shape]) or 1))
        .reshape([int(d) for d in param.shape])
        .astype(param.dtype)
    )
    results = []
    for mod in (first, second):
        compiled = relay_aot.compile(mod)
        expected = relay.create_executor("debug", mod=mod).evaluate()(x).numpy()
        out = compiled(x).numpy()
        np.testing.assert_array_equal(out, expected)
        results.append((out, compiled.build_result.key))
    assert not np.array_equal(results[0][0], results[1][0]), "the look-alikes compute the same values"
    assert results[0][1] != results[1][1]


def test_every_output_setting_changes_the_key(monkeypatch):
    """Each setting that changes what is built is in the key; the others are not."""
    alternative = {
        "RELAY_AOT_TARGET": "llvm",
        "RELAY_AOT_SCALAR_FAST_PATH": "0",
        "RELAY_AOT_PARALLEL_THRESHOLD": "7",
        "CXX": "c++",
        "RELAY_AOT_CXXFLAGS": "-DRELAY_AOT_TEST_FLAG",
        "RELAY_AOT_PCH": "0",
        "RELAY_AOT_PREBUILT": "0",
        "RELAY_AOT_PROFILE": "1",
        "RELAY_AOT_STANDALONE": "1",
        "RELAY_AOT_C_KERNELS": "1",
        "RELAY_AOT_WINOGRAD": "0",
        "RELAY_AOT_JOBS": "3",
        "RELAY_AOT_CACHE_DIR": "/tmp/elsewhere",
        "RELAY_AOT_LOCK_TIMEOUT": "5",
        "RELAY_AOT_PROGRESS": "1",
    }
    fields = dataclasses.fields(config.Config)
    assert {f.metadata["env"] for f in fields} == set(alternative), "a setting without a test value"
    for variable in alternative:
        monkeypatch.delenv(variable, raising=False)
    base = config.Config.from_environment()
    flags = builder.BuildFlags.default(base)
    key = builder.index_key(["module"], flags, base)
    for field in fields:
        env = field.metadata["env"]
        changed = config.Config.from_environment({env: alternative[env]})
        assert getattr(changed, field.name) != getattr(base, field.name), env
        changed_key = builder.index_key(["module"], flags, changed)
        assert (changed_key != key) == field.metadata["output"], env
