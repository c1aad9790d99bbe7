"""Which oneDNN kernels a CPU runs, from its flags and the ISA cap; the support check answers under the cap."""

import json
import os
import subprocess
import sys

import pytest

from tf_msemb.inference.cpu_features import ISAS
from tf_msemb.inference.cpu_features import CpuKernels
from tf_msemb.inference.cpu_features import isa_cap
from tf_msemb.inference.cpu_features import onednn_opts_on
from tf_msemb.inference.cpu_features import read_flags
from tf_msemb.inference.int8_calibration import Int8Options

# Real CPUs' int8-relevant flags (from their /proc/cpuinfo): Zen 3 (AVX2 only), Skylake-SP (AVX-512, no VNNI),
# Cascade Lake (VNNI, no BF16), Alder Lake (AVX-VNNI, no AVX-512), Sapphire Rapids (everything up to AMX).
ZEN3 = frozenset("sse4_1 avx avx2 fma".split())
SKYLAKE = ZEN3 | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"}
CASCADE_LAKE = SKYLAKE | {"avx512_vnni"}
ALDER_LAKE = ZEN3 | {"avx_vnni"}
SAPPHIRE_RAPIDS = CASCADE_LAKE | {"avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16"}


def test_isas_and_what_int8_and_bfloat16_get_on_real_cpus():
    rows = {name: CpuKernels(flags) for name, flags in [("zen3", ZEN3), ("skylake", SKYLAKE), ("cascade", CASCADE_LAKE),
                                                         ("alder", ALDER_LAKE), ("sapphire", SAPPHIRE_RAPIDS)]}
    assert {name: kernels.isa for name, kernels in rows.items()} == {
        "zen3": "avx2", "skylake": "avx512_core", "cascade": "avx512_core_vnni", "alder": "avx2_vnni",
        "sapphire": "avx10_1_512_amx"}
    # bfloat16 data needs AVX-512 (emulated below AVX512-BF16); exact u8 x s8 sums need AVX512-VNNI: AVX-VNNI is not
    # enough (oneDNN's f32-output int8 path there still saturated: max difference 0.008 measured).
    assert {name: (k.bfloat16, k.exact_int8) for name, k in rows.items()} == {
        "zen3": (False, False), "skylake": (True, False), "cascade": (True, True), "alder": (False, False),
        "sapphire": (True, True)}
    assert all(kernels.int8_unsupported() is None for kernels in rows.values())
    assert "float32 outputs" not in rows["sapphire"].int8_note() and "exact sums" in rows["sapphire"].int8_note()
    zen = rows["zen3"].int8_note()
    assert "int8 matmuls write float32" in zen and "pair of adjacent rows" in zen and "oneDNN ISA avx2" in zen


def test_the_cap_limits_the_isa_as_onednn_does():
    # Wrong code this fails: the cap ignored (AVX-512 kept), an alias or lowercase name not understood, an unknown
    # value taken as a cap (oneDNN ignores those).
    assert isa_cap({"ONEDNN_MAX_CPU_ISA": "AVX2"}) == ("ONEDNN_MAX_CPU_ISA", "avx2")
    assert isa_cap({"DNNL_MAX_CPU_ISA": "avx512_core_amx"}) == ("DNNL_MAX_CPU_ISA", "avx10_1_512_amx")
    assert isa_cap({"ONEDNN_MAX_CPU_ISA": "ALL"}) is None and isa_cap({"ONEDNN_MAX_CPU_ISA": "turbo"}) is None
    assert isa_cap({}) is None
    capped = CpuKernels(SAPPHIRE_RAPIDS, isa_cap({"ONEDNN_MAX_CPU_ISA": "AVX2"}))
    assert (capped.isa, capped.bfloat16, capped.exact_int8) == ("avx2", False, False)
    assert "capped by ONEDNN_MAX_CPU_ISA=AVX2" in capped.where()
    vnni = CpuKernels(SAPPHIRE_RAPIDS, ("ONEDNN_MAX_CPU_ISA", "avx512_core_vnni"))
    assert (vnni.isa, vnni.bfloat16, vnni.exact_int8) == ("avx512_core_vnni", True, True)
    # A cap above what the CPU has changes nothing.
    assert CpuKernels(ZEN3, ("ONEDNN_MAX_CPU_ISA", "avx10_1_512_amx")).isa == "avx2"


def test_int8_is_refused_with_a_reason_off_x86_and_below_avx2():
    assert "x86-64" in CpuKernels(ZEN3, machine="aarch64").int8_unsupported()
    assert "no AVX2" in CpuKernels(frozenset({"sse4_1", "avx"})).int8_unsupported()
    assert "unknown" in CpuKernels(None).int8_unsupported()


def test_bfloat16_matmuls_abort_only_where_onednn_gets_them_without_kernels():
    assert "no bfloat16 kernels" in CpuKernels(ZEN3, onednn_opts=True).bfloat16_matmul_unsupported()
    assert CpuKernels(ZEN3, onednn_opts=False).bfloat16_matmul_unsupported() is None  # Eigen's kernels
    assert CpuKernels(SKYLAKE, onednn_opts=True).bfloat16_matmul_unsupported() is None
    assert CpuKernels(SKYLAKE).bfloat16_emulated() and not CpuKernels(SAPPHIRE_RAPIDS).bfloat16_emulated()
    # TensorFlow's default: on with AVX512-VNNI, AVX512-BF16, AVX-VNNI or AMX (Linux), the variable first.
    assert not onednn_opts_on(ZEN3, {}, "Linux") and onednn_opts_on(ALDER_LAKE, {}, "Linux")
    assert onednn_opts_on(ZEN3, {"TF_ENABLE_ONEDNN_OPTS": "1"}, "Linux")
    assert not onednn_opts_on(SAPPHIRE_RAPIDS, {"TF_ENABLE_ONEDNN_OPTS": "0"}, "Linux")
    assert onednn_opts_on(ZEN3, {}, "Windows")


def test_int8_options_follow_the_cpu_and_the_target():
    native = Int8Options().for_cpu(CpuKernels(SAPPHIRE_RAPIDS))
    assert (native.attention, native.weight_scale, native.fallback_dtype) == ("bfloat16", "column", "bfloat16")
    assert [isas for isas, _ in native.cpu_requirements()] == [("avx2",), ("avx512_core", "avx2_vnni_2"),
                                                               ("avx512_core_vnni",)]
    for options in (Int8Options().for_cpu(CpuKernels(ZEN3)), Int8Options(target="avx2").for_cpu(CpuKernels(
            SAPPHIRE_RAPIDS))):
        assert (options.attention, options.weight_scale, options.fallback_dtype) == ("float32", "paired", "float32")
        assert [isas for isas, _ in options.cpu_requirements()] == [("avx2",)]
    skylake = Int8Options().for_cpu(CpuKernels(SKYLAKE))
    assert (skylake.attention, skylake.weight_scale) == ("bfloat16", "paired")
    assert Int8Options(attention="float32").for_cpu(CpuKernels(SAPPHIRE_RAPIDS)).attention == "float32"
    with pytest.raises(ValueError, match="int8 attention 'bfloat16' cannot run on this CPU \\(oneDNN ISA avx2\\)"):
        Int8Options(attention="bfloat16").for_cpu(CpuKernels(ZEN3))
    with pytest.raises(ValueError, match="int8 target 'avx512'"):
        Int8Options(target="avx512")


def test_read_flags_reads_the_first_flags_line(tmp_path):
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nflags\t\t: fpu avx2 sse4_1\n\nprocessor\t: 1\nflags\t: x\n")
    assert read_flags(str(tmp_path / "cpuinfo")) == {"fpu", "avx2", "sse4_1"}
    (tmp_path / "arm").write_text("processor\t: 0\nFeatures\t: fp asimd\n")
    assert read_flags(str(tmp_path / "arm")) is None and read_flags(str(tmp_path / "none")) is None


@pytest.mark.int8
def test_the_support_check_answers_under_the_avx2_cap_and_does_not_abort():
    """The old probe built an int8 graph in its caller's process and oneDNN aborted it on AVX2."""
    if read_flags() is None or not {"avx2", "sse4_1"} <= read_flags():
        pytest.skip("this CPU has no AVX2 flags line in /proc/cpuinfo")
    code = ("import json; from tf_msemb.inference.packed import int8_support; s = int8_support(); "
            "print(json.dumps([s.unsupported, s.note]))")
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2", TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    unsupported, note = json.loads(result.stdout.strip().splitlines()[-1])
    assert unsupported is None
    assert "capped by ONEDNN_MAX_CPU_ISA=AVX2" in note and "write float32" in note and "at most 128" in note


def test_every_isa_builds_on_the_ones_below_it():
    assert set(ISAS["avx2"]) <= set(ISAS["avx2_vnni_2"]) and set(ISAS["avx512_core_vnni"]) <= set(
        ISAS["avx10_1_512_amx"])


def test_the_support_check_lets_a_bug_raise_instead_of_answering_unsupported(monkeypatch):
    """A check that caught every exception would turn a bug into "int8 unsupported" and every int8 test into a skip;
    only the CPU's features and TensorFlow's op registry may say no."""
    from tf_msemb.inference import packed

    def broken(environ=None):
        raise KeyError("a bug in reading the CPU")

    monkeypatch.setattr(packed, "this_cpu", broken)
    packed.int8_support.cache_clear()
    try:
        with pytest.raises(KeyError, match="a bug in reading the CPU"):
            packed.int8_support()
    finally:
        monkeypatch.undo()
        packed.int8_support.cache_clear()
