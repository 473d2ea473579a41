"""dtype auto: bfloat16 only where the device computes it natively, decided from the hardware, and resolved
before any identity or cache key is made."""

import pytest

from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.models import model_identity
from selfpref_sweep.models.local import precision
from selfpref_sweep.models.local.weights import local_hf_dir_path

ZEN3_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu vme sse sse2 avx f16c avx2 fma bmi2 sha_ni vaes
"""
SAPPHIRE_RAPIDS_CPUINFO = """processor\t: 0
flags\t\t: fpu sse avx2 avx512f avx512bw avx512_bf16 amx_bf16 amx_tile
"""
GRAVITON3_CPUINFO = """processor\t: 0
Features\t: fp asimd evtstrm aes sve bf16 i8mm
"""


@pytest.mark.parametrize("cpuinfo, native", [(ZEN3_CPUINFO, False), (SAPPHIRE_RAPIDS_CPUINFO, True),
                                             (GRAVITON3_CPUINFO, True), ("", False)])
def test_native_bf16_is_read_from_the_cpu_flags(cpuinfo, native):
    assert bool(precision.cpu_flags(cpuinfo) & precision.NATIVE_BF16_CPU_FLAGS) is native


def test_avx512_without_bf16_instructions_is_not_native():
    flags = precision.cpu_flags("flags\t: avx2 avx512f avx512bw avx512_vnni\n")
    assert "avx512f" in flags and not flags & precision.NATIVE_BF16_CPU_FLAGS


@pytest.fixture
def bf16_native(monkeypatch):
    def _set(native: bool):
        monkeypatch.setattr(precision, "native_bf16", lambda: native)
    return _set


@pytest.mark.parametrize("native, expected", [(True, "bfloat16"), (False, "float32")])
def test_auto_resolves_by_the_hardware_and_explicit_dtypes_pass_through(bf16_native, native, expected):
    bf16_native(native)
    assert precision.resolve_dtype("auto") == expected
    assert precision.resolve_dtype("bfloat16") == "bfloat16"
    assert precision.resolve_dtype("float32") == "float32"


@pytest.mark.parametrize("native, expected", [(True, "bfloat16"), (False, "float32")])
def test_cells_identities_and_weight_dirs_hold_the_resolved_dtype(compose_cfg, bf16_native, tmp_path, native,
                                                                   expected):
    bf16_native(native)
    spec = resolve_cell(compose_cfg(["evaluator=qwen05", "source=smollm135"]))
    assert spec.evaluator.dtype == expected and spec.source_model.dtype == expected
    identity = model_identity(spec.evaluator)
    assert identity.dtype == expected
    assert f"qwen05-{expected}-" in local_hf_dir_path(spec.evaluator, str(tmp_path)).name
    # An explicit dtype is kept whatever the machine.
    spec = resolve_cell(compose_cfg(["evaluator=qwen05", "evaluator.dtype=bfloat16", "source=human"]))
    assert spec.evaluator.dtype == "bfloat16"


def test_bf16_and_float32_calls_are_cached_apart(compose_cfg, bf16_native):
    keys = set()
    for native in (True, False):
        bf16_native(native)
        keys.add(model_identity(resolve_cell(compose_cfg(["evaluator=qwen05", "source=human"])).evaluator))
    assert len(keys) == 2
