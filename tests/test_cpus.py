"""The CPU rules (tf_msemb.cpus) on real machines' /proc/cpuinfo, and the export's graph (export.cpu_check) giving
the same answer and message as Python on every one of them."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from tf_msemb.cpus import BFLOAT16_REQUIREMENT
from tf_msemb.cpus import INT8_REQUIREMENT
from tf_msemb.cpus import ISAS
from tf_msemb.cpus import CpuKernels
from tf_msemb.cpus import CpuRequirement
from tf_msemb.cpus import MachineError
from tf_msemb.cpus import first_unmet
from tf_msemb.cpus import isa_cap
from tf_msemb.cpus import machine_kernels
from tf_msemb.cpus import read_cpuinfo
from tf_msemb.cpus import require
from tf_msemb.inference.int8_calibration import Int8Options

CPUINFO = pathlib.Path(__file__).resolve().parent / "fixtures" / "cpuinfo"


def cpuinfo(name):
    """The /proc/cpuinfo of a real machine (tests/fixtures/cpuinfo/README.md says where each came from)."""
    return (CPUINFO / f"{name}.txt").read_text(encoding="utf-8")


X86 = ("zen3_ryzen_5900x", "skylake_sp_xeon_8175m", "cascade_lake_xeon_8272cl", "sapphire_rapids_xeon_8462y",
       "zen5_epyc")
ARM = ("graviton3_neoverse_v1", "graviton2_neoverse_n1")


def kernels(name, environ=None, macos=False):
    """The `CpuKernels` of fixture `name` (None: a machine without /proc/cpuinfo) under `environ`."""
    return machine_kernels(None if name is None else cpuinfo(name), environ or {}, macos)


def test_the_platform_and_isa_of_real_machines():
    rows = {name: kernels(name) for name in X86 + ARM}
    assert {name: k.platform for name, k in rows.items()} == {
        **{name: "linux-x86_64" for name in X86}, **{name: "linux-aarch64" for name in ARM}}
    assert {name: k.isa for name, k in rows.items()} == {
        "zen3_ryzen_5900x": "avx2", "skylake_sp_xeon_8175m": "avx512_core",
        "cascade_lake_xeon_8272cl": "avx512_core_vnni", "sapphire_rapids_xeon_8462y": "avx10_1_512_amx",
        "zen5_epyc": "avx512_core_bf16", "graviton3_neoverse_v1": "none", "graviton2_neoverse_n1": "none"}
    # bfloat16 data needs AVX-512 (emulated below AVX512-BF16); exact u8 x s8 sums need AVX512-VNNI.
    assert {name: (k.bfloat16, k.exact_int8) for name, k in rows.items() if name in X86} == {
        "zen3_ryzen_5900x": (False, False), "skylake_sp_xeon_8175m": (True, False),
        "cascade_lake_xeon_8272cl": (True, True), "sapphire_rapids_xeon_8462y": (True, True),
        "zen5_epyc": (True, True)}
    assert rows["graviton3_neoverse_v1"].features >= {"bf16", "sve", "i8mm"}
    assert kernels(None).platform == "other" and kernels(None, macos=True).platform == "macos"
    assert machine_kernels("processor\t: 0\ncpu\t\t: POWER9\n", {}, False).platform == "linux-other"
    zen = rows["zen3_ryzen_5900x"].int8_note()
    assert "int8 matmuls write float32" in zen and "pair of adjacent rows" in zen and "oneDNN ISA avx2" in zen
    assert "exact sums" in rows["sapphire_rapids_xeon_8462y"].int8_note()


def test_the_first_flags_line_decides():
    # A machine whose blocks differ (a hybrid CPU, or a hypervisor's mask): oneDNN's CPUID is the first core's.
    text = cpuinfo("zen3_ryzen_5900x") + "\n" + cpuinfo("sapphire_rapids_xeon_8462y")
    assert kernels("zen3_ryzen_5900x").flags == machine_kernels(text, {}, False).flags


def test_the_cap_limits_the_isa_as_onednn_reads_it():
    # Wrong code this fails: the cap ignored, an alias or lowercase name not understood, an unknown value taken as a
    # cap, an empty ONEDNN_ value hiding DNNL_'s (oneDNN skips empty ones), a value stripped (oneDNN compares it
    # whole).
    assert isa_cap({"ONEDNN_MAX_CPU_ISA": "AVX2"}) == ("ONEDNN_MAX_CPU_ISA", "avx2")
    assert isa_cap({"DNNL_MAX_CPU_ISA": "avx512_core_amx"}) == ("DNNL_MAX_CPU_ISA", "avx10_1_512_amx")
    assert isa_cap({"ONEDNN_MAX_CPU_ISA": "ALL"}) is None and isa_cap({"ONEDNN_MAX_CPU_ISA": "turbo"}) is None
    assert isa_cap({"ONEDNN_MAX_CPU_ISA": "", "DNNL_MAX_CPU_ISA": "avx2"}) == ("DNNL_MAX_CPU_ISA", "avx2")
    assert isa_cap({"ONEDNN_MAX_CPU_ISA": " avx2"}) is None and isa_cap({}) is None
    capped = kernels("sapphire_rapids_xeon_8462y", {"ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert (capped.isa, capped.bfloat16, capped.exact_int8) == ("avx2", False, False)
    assert "capped by ONEDNN_MAX_CPU_ISA=AVX2" in capped.where()
    vnni = kernels("sapphire_rapids_xeon_8462y", {"ONEDNN_MAX_CPU_ISA": "avx512_core_vnni"})
    assert (vnni.isa, vnni.bfloat16, vnni.exact_int8) == ("avx512_core_vnni", True, True)
    assert kernels("zen3_ryzen_5900x", {"ONEDNN_MAX_CPU_ISA": "avx10_1_512_amx"}).isa == "avx2"  # above: no change


def test_tensorflow_s_onednn_rewrites_by_platform_cpu_and_variable():
    default = {name: kernels(name).onednn_opts for name in X86 + ARM}
    assert default == {"zen3_ryzen_5900x": False, "skylake_sp_xeon_8175m": False, "cascade_lake_xeon_8272cl": True,
                       "sapphire_rapids_xeon_8462y": True, "zen5_epyc": True, "graviton3_neoverse_v1": True,
                       "graviton2_neoverse_n1": False}
    assert kernels("zen3_ryzen_5900x", {"TF_ENABLE_ONEDNN_OPTS": "TRUE"}).onednn_opts
    assert not kernels("sapphire_rapids_xeon_8462y", {"TF_ENABLE_ONEDNN_OPTS": "0"}).onednn_opts
    assert kernels("sapphire_rapids_xeon_8462y", {"TF_ENABLE_ONEDNN_OPTS": " 0"}).onednn_opts  # not a value TF reads
    assert not kernels(None, {"TF_ENABLE_ONEDNN_OPTS": "1"}, macos=True).onednn_opts  # macOS builds have no oneDNN


def test_bfloat16_stops_only_where_tensorflow_hands_it_to_onednn_without_a_kernel():
    def unsupported(name, environ=None, macos=False):
        return kernels(name, environ, macos).bfloat16_matmul_unsupported()

    on, cap = {"TF_ENABLE_ONEDNN_OPTS": "1"}, {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    # An AVX-512 CPU capped below its bfloat16 kernels, rewrites on: oneDNN gets the matmuls and has no kernel.
    message = unsupported("sapphire_rapids_xeon_8462y", cap)
    assert "needs oneDNN ISA avx512_core or avx2_vnni_2" in message and "oneDNN ISA cap: avx2" in message
    assert "TF_ENABLE_ONEDNN_OPTS=0" in message and "missing CPU flags: none" in message
    assert unsupported("skylake_sp_xeon_8175m", on | cap) is not None
    # The same CPUs with the rewrites off, or uncapped: Eigen's kernels, or oneDNN's own.
    assert unsupported("skylake_sp_xeon_8175m", cap) is None  # off by default there (no VNNI)
    assert unsupported("sapphire_rapids_xeon_8462y", cap | {"TF_ENABLE_ONEDNN_OPTS": "0"}) is None
    assert unsupported("sapphire_rapids_xeon_8462y") is None and unsupported("skylake_sp_xeon_8175m", on) is None
    # No AVX512F (nor AVX-NE-CONVERT): TensorFlow keeps bfloat16 on Eigen even with its rewrites on.
    assert unsupported("zen3_ryzen_5900x", on | cap) is None
    # Elsewhere bfloat16 always runs on Eigen.
    assert all(unsupported(name, on) is None for name in ARM) and unsupported(None, on, macos=True) is None
    assert unsupported(None, on) is None
    assert kernels("skylake_sp_xeon_8175m").bfloat16_emulated() and not kernels("zen5_epyc").bfloat16_emulated()


def test_int8_runs_on_linux_x86_64_with_avx2_only_and_says_why_elsewhere():
    assert all(kernels(name).int8_unsupported() is None for name in X86)
    assert "not on Linux aarch64" in kernels("graviton3_neoverse_v1").int8_unsupported()
    assert "not on macOS" in kernels(None, macos=True).int8_unsupported()
    assert "not on a system without /proc/cpuinfo" in kernels(None).int8_unsupported()
    old = machine_kernels("processor\t: 0\nflags\t\t: fpu sse4_1 avx\n", {}, False).int8_unsupported()
    assert "needs oneDNN ISA avx2" in old and "missing CPU flags: avx2" in old
    with pytest.raises(MachineError, match="not on Linux aarch64"):
        require([INT8_REQUIREMENT], "this int8 export", kernels("graviton2_neoverse_n1"))


def test_int8_options_follow_the_cpu_and_the_target():
    sapphire, zen = kernels("sapphire_rapids_xeon_8462y"), kernels("zen3_ryzen_5900x")
    native = Int8Options().for_cpu(sapphire)
    assert (native.attention, native.weight_scale, native.fallback_dtype) == ("bfloat16", "column", "bfloat16")
    assert [isas for isas, _ in native.cpu_requirements()] == [("avx2",), ("avx512_core", "avx2_vnni_2"),
                                                               ("avx512_core_vnni",)]
    for options in (Int8Options().for_cpu(zen), Int8Options(target="avx2").for_cpu(sapphire)):
        assert (options.attention, options.weight_scale, options.fallback_dtype) == ("float32", "paired", "float32")
        assert [isas for isas, _ in options.cpu_requirements()] == [("avx2",)]
    skylake = Int8Options().for_cpu(kernels("skylake_sp_xeon_8175m"))
    assert (skylake.attention, skylake.weight_scale) == ("bfloat16", "paired")
    assert Int8Options(attention="float32").for_cpu(sapphire).attention == "float32"
    with pytest.raises(ValueError, match="int8 attention 'bfloat16' cannot run on this CPU \\(oneDNN ISA avx2\\)"):
        Int8Options(attention="bfloat16").for_cpu(zen)
    with pytest.raises(ValueError, match="int8 target 'avx512'"):
        Int8Options(target="avx512")
    # An avx2-target export must run on every AVX2 CPU: bfloat16 attention (AVX-512) is refused, on any machine.
    with pytest.raises(ValueError, match="would not run on every AVX2 CPU"):
        Int8Options(target="avx2", attention="bfloat16")


def test_every_isa_builds_on_the_ones_below_it():
    assert set(ISAS["avx2"]) <= set(ISAS["avx2_vnni_2"]) and set(ISAS["avx512_core_vnni"]) <= set(
        ISAS["avx10_1_512_amx"])


def test_read_cpuinfo_is_none_where_there_is_none(tmp_path):
    (tmp_path / "cpuinfo").write_text("flags\t: avx2\n")
    assert read_cpuinfo(str(tmp_path / "cpuinfo")) == "flags\t: avx2\n"
    assert read_cpuinfo(str(tmp_path / "absent")) is None


# What the graph is fed: each machine under each environment, with the requirements of every export kind.
ENVIRONMENTS = [{}, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, {"DNNL_MAX_CPU_ISA": "avx512_core_amx"},
                {"ONEDNN_MAX_CPU_ISA": "", "DNNL_MAX_CPU_ISA": "avx2"}, {"ONEDNN_MAX_CPU_ISA": " avx2"},
                {"TF_ENABLE_ONEDNN_OPTS": "1", "ONEDNN_MAX_CPU_ISA": "avx2"}, {"TF_ENABLE_ONEDNN_OPTS": "False"},
                {"XONEDNN_MAX_CPU_ISA": "AVX2", "NOTE": "ONEDNN_MAX_CPU_ISA=AVX2"}]
REQUIREMENTS = {
    "bfloat16": [BFLOAT16_REQUIREMENT],
    "int8 native": [CpuRequirement(tuple(isas), purpose, "advice")
                    for isas, purpose in Int8Options().for_cpu(CpuKernels(frozenset(ISAS["avx10_1_512_amx"])))
                    .cpu_requirements()],
    "int8 avx2": [INT8_REQUIREMENT],
    "avx512 only": [CpuRequirement(("avx512_core",), "a test kernel", "serve the other export")],
}
MACHINES = [(name, False) for name in X86 + ARM] + [(None, True), (None, False),
                                                    ("zen3_ryzen_5900x+sapphire_rapids_xeon_8462y", False),
                                                    ("power9", False)]


def _text(name):
    if name is None:
        return None
    if name == "power9":
        return "processor\t: 0\ncpu\t\t: POWER9\n"
    return "\n".join(cpuinfo(part) for part in name.split("+"))


def test_the_graph_decides_as_python_on_every_machine_and_environment():
    """Wrong code this fails: any rule the graph applies differently (the last flags line, a stripped or empty cap,
    an alias, the variables' order, the rewrites' default, a platform's branch)."""
    import tensorflow as tf

    from tf_msemb.export.cpu_check import graph_first_unmet

    cases, differ = 0, []
    answers = set()
    for name, macos in MACHINES:
        text = _text(name)
        for environ in ENVIRONMENTS:
            machine = machine_kernels(text, environ, macos)
            environ_text = "".join(f"{key}={value}\0" for key, value in environ.items())
            for kind, requirements in REQUIREMENTS.items():
                want = first_unmet(requirements, machine, "this export")
                ok, message = graph_first_unmet(requirements, "this export", tf.constant(text or ""),
                                                tf.constant(text is not None), tf.constant(macos),
                                                tf.constant(environ_text))
                got = None if bool(ok) else message.numpy().decode("utf-8")
                assert not set(got or "") & set("'\"\\"), got  # tf.debugging.Assert would print them escaped
                cases += 1
                answers.add(want is None)
                if got != want:
                    differ.append((name, macos, environ, kind, want, got))
    assert not differ, differ[:3]
    assert cases == len(MACHINES) * len(ENVIRONMENTS) * len(REQUIREMENTS) and answers == {True, False}


@pytest.mark.int8
def test_the_support_check_answers_under_the_avx2_cap_and_does_not_abort():
    """The old probe built an int8 graph in its caller's process and oneDNN aborted it on AVX2."""
    this = machine_kernels(read_cpuinfo(), {}, False)
    if this.platform != "linux-x86_64" or not this.runs("avx2"):
        pytest.skip(f"{this.where()} has no AVX2")
    code = ("import json; from tf_msemb.inference.packed import int8_support; s = int8_support(); "
            "print(json.dumps([s.unsupported, s.note]))")
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2", TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    unsupported, note = json.loads(result.stdout.strip().splitlines()[-1])
    assert unsupported is None
    assert "capped by ONEDNN_MAX_CPU_ISA=AVX2" in note and "write float32" in note and "at most 128" in note


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
