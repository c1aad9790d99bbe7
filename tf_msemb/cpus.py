"""Which kernels a machine runs, decided from what it shows: nothing is built or run to find out.

oneDNN picks its kernels by instruction set ("ISA"), and a kernel it has
none for is not an error TensorFlow catches: `_QuantizedMatMul` and oneDNN's
bfloat16 matmuls abort the process (`dnnl::error` at primitive creation,
outside the kernel's try block). So whether an int8 or bfloat16 graph can
run is decided here, before it runs, from three inputs: the text of
`/proc/cpuinfo` (None where there is none), the environment, and whether
the machine is a Mac (`MACOS_MARKER` exists). The same rules run in Python
(exports, training precision, the benchmark tools: `this_cpu`) and in an
export's graph when it loads (`export.cpu_check`, which reads the same three
inputs with TensorFlow ops; `tests/test_cpus.py` checks both give the same
answer and message on real machines' cpuinfo).

The platform, from those inputs: `linux-x86_64` (cpuinfo has a `flags`
line), `linux-aarch64` (a `Features` line and no `flags` line: Graviton,
Ampere), `linux-other`, `macos` (no cpuinfo, the marker there) and `other`
(no cpuinfo: Windows and the rest, where nothing can be checked).

On Linux x86-64, as oneDNN 3.7 decides (`cpu_isa_traits.hpp`,
`platform::has_data_type_support`), under the cap `ONEDNN_MAX_CPU_ISA` (or
`DNNL_MAX_CPU_ISA`) puts on the flags:

- bfloat16 data (int8 matmuls writing bfloat16, bfloat16 matmuls): AVX-512
  (`avx512_core`, emulated below AVX512-BF16) or AVX-VNNI-INT8 with
  AVX-NE-CONVERT (`avx2_vnni_2`). Elsewhere oneDNN has no kernel at all.
- exact u8 x s8 sums: AVX512-VNNI (`avx512_core_vnni`). Below it oneDNN
  multiplies with `vpmaddubsw`, which adds pairs of products into 16 bits
  and saturates (255 * 127 * 2 > 32767): all-MiniLM-L6-v2's int8 vectors
  under `ONEDNN_MAX_CPU_ISA=AVX2` came out at a mean cosine of 0.9961 to the
  same export's exact ones (min 0.991; 0.9999 at `AVX2_VNNI`). The pairs
  are adjacent input channels (`2j`, `2j + 1`; measured under the AVX2 and
  AVX512_CORE caps), so weights whose every such pair sums to at most 128
  in magnitude keep each pair sum within 16 bits (255 * 128 = 32,640):
  `WEIGHT_SCALES["paired"]`, where oneDNN's own advice (and ONNX Runtime's
  `reduce_range`) is 7-bit weights, half the levels of every weight.

TensorFlow's own graph rewrites to oneDNN (`TF_ENABLE_ONEDNN_OPTS`) are on
by default on Linux x86-64 where the CPU has AVX512-VNNI, AVX512-BF16,
AVX-VNNI or AMX (`onednn_opts`); without them a bfloat16 matmul runs on
Eigen, which has a (slow) kernel for every CPU.

TensorFlow hands a bfloat16 op to oneDNN only where its rewrites are on and
the CPU itself (CPUID, not the cap) has AVX512F or AVX-NE-CONVERT
(`IsDataTypeSupportedByOneDNNOnThisCPU`, `core/util/util.cc`); elsewhere it
keeps Eigen's kernel. So a bfloat16 matmul aborts only where oneDNN gets it
and has no bfloat16 kernel under the cap (`ONEDNN_MAX_CPU_ISA=AVX2` on an
AVX-512 CPU), and runs everywhere else.

Elsewhere (docs/cpus.md, "Platforms", says which of these was run): int8
graphs need oneDNN's x86 kernels, so an int8 export is refused on every
platform but Linux x86-64 (on macOS TensorFlow does not even register its
ops: the load stops at TensorFlow's "Op type not registered", and the
package's loaders say so first, `export.saved_model.check_loadable`). A
bfloat16 graph runs on Eigen on Linux aarch64 (TensorFlow never hands
bfloat16 to oneDNN there: neither feature is an x86 one), on macOS (its
wheels have no oneDNN) and on the unknown platforms.
"""

import dataclasses
import os
import re

CPUINFO = "/proc/cpuinfo"
ENVIRON = "/proc/self/environ"
MACOS_MARKER = "/System/Library/CoreServices/SystemVersion.plist"  # on every macOS, on nothing else
# The platforms the rules tell apart, and how messages name them.
PLATFORMS = {"linux-x86_64": "Linux x86-64", "linux-aarch64": "Linux aarch64",
             "linux-other": "Linux on a CPU that is neither x86-64 nor aarch64", "macos": "macOS",
             "other": "a system without /proc/cpuinfo (Windows or another non-Linux system)"}

# oneDNN's ISA names, lowest first, and the /proc/cpuinfo flags each needs (each includes the ones it builds on).
_SSE41 = ("sse4_1",)
_AVX2 = _SSE41 + ("avx", "avx2")
_AVX512_CORE = _AVX2 + ("avx512f", "avx512bw", "avx512vl", "avx512dq")
_AVX512_BF16 = _AVX512_CORE + ("avx512_vnni", "avx512_bf16")
ISAS = {
    "sse41": _SSE41,
    "avx": _SSE41 + ("avx",),
    "avx2": _AVX2,
    "avx2_vnni": _AVX2 + ("avx_vnni",),
    "avx2_vnni_2": _AVX2 + ("avx_vnni", "avx_vnni_int8", "avx_ne_convert"),
    "avx512_core": _AVX512_CORE,
    "avx512_core_vnni": _AVX512_CORE + ("avx512_vnni",),
    "avx512_core_bf16": _AVX512_BF16,
    "avx10_1_512": _AVX512_BF16 + ("avx512_fp16",),
    "avx10_1_512_amx": _AVX512_BF16 + ("avx512_fp16", "amx_tile", "amx_int8", "amx_bf16"),
    "avx10_1_512_amx_fp16": _AVX512_BF16 + ("avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "amx_fp16"),
}
# Older names `ONEDNN_MAX_CPU_ISA` still takes for the same ISAs.
ISA_ALIASES = {"avx512_core_fp16": "avx10_1_512", "avx512_core_amx": "avx10_1_512_amx",
               "avx512_core_amx_fp16": "avx10_1_512_amx_fp16"}
# oneDNN reads the first of these that is set and not empty (`getenv_string_user`: "ONEDNN_" before "DNNL_"),
# upper-cases it and compares it whole (no stripping): an unknown value is ignored.
CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
# What bfloat16 data needs (any one of them), and what exact u8 x s8 sums need.
BFLOAT16_ISAS = ("avx512_core", "avx2_vnni_2")
EXACT_INT8_ISAS = ("avx512_core_vnni",)
INT8_BASE_ISAS = ("avx2",)  # the least ISA int8 exports are tested on (oneDNN's int8 GEMM itself needs SSE4.1)
# The CPU flags with which TensorFlow turns its oneDNN rewrites on by default (Linux x86-64; `port.cc`).
ONEDNN_DEFAULT_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")
# The CPU flags with which TensorFlow hands bfloat16 ops to oneDNN at all (`IsDataTypeSupportedByOneDNNOnThisCPU`).
ONEDNN_BFLOAT16_FLAGS = ("avx512f", "avx_ne_convert")
# The aarch64 CPU on which TensorFlow turns its oneDNN rewrites on by default (Neoverse V1: Graviton 3; `port.cc`).
ONEDNN_DEFAULT_AARCH64 = {"CPU implementer": "0x41", "CPU part": "0xd40"}
# How an int8 matmul's weight columns are scaled: `column`, by their largest magnitude (to 127); `paired`, also so
# that every pair of adjacent rows sums to at most 127 in magnitude before rounding (128 after): exact on CPUs whose
# oneDNN kernels add u8 x s8 products in 16-bit pairs (no VNNI).
WEIGHT_SCALES = ("column", "paired")
# TensorFlow's boolean environment values (`ReadBoolFromEnvVar`: lower-cased, not stripped).
TRUE_VALUES, FALSE_VALUES = ("1", "true"), ("0", "false")


def cpuinfo_field(cpuinfo, name):
    """The value of the first line `<name>[ \\t]*:<value>` of `cpuinfo`, or None (`cpu_check._field_pattern` in a graph)."""
    for line in cpuinfo.split("\n"):
        found = re.fullmatch(rf"{name}[ \t]*:([^\n]*)", line)
        if found:
            return found.group(1)
    return None


def platform_of(cpuinfo, macos):
    """The `PLATFORMS` key of a machine showing `cpuinfo` (None: no /proc/cpuinfo) and `macos` (the marker)."""
    if cpuinfo is None:
        return "macos" if macos else "other"
    if cpuinfo_field(cpuinfo, "flags") is not None:
        return "linux-x86_64"
    if cpuinfo_field(cpuinfo, "Features") is not None:
        return "linux-aarch64"
    return "linux-other"


def environment_value(environ, variable):
    """`variable`'s value in `environ`, lower-cased, or "" where unset."""
    return environ.get(variable, "").lower()


def isa_cap(environ=None):
    """`(variable, oneDNN ISA name)` of the cap set in `environ` (default `os.environ`), or None: unset, empty,
    `ALL`, `DEFAULT` or a name oneDNN does not know (it ignores those too)."""
    environ = os.environ if environ is None else environ
    for variable in CAP_VARIABLES:
        value = environment_value(environ, variable)
        if value:
            value = ISA_ALIASES.get(value, value)
            return (variable, value) if value in ISAS else None
    return None


def onednn_opts_on(platform, flags, cpuinfo, environ=None):
    """Whether TensorFlow's oneDNN rewrites are on: never on macOS and the unknown platforms (their builds have no
    oneDNN, or nothing can be read); on Linux `TF_ENABLE_ONEDNN_OPTS` when it says yes or no, else on x86-64 with
    one of `ONEDNN_DEFAULT_FLAGS` and on aarch64 on a Neoverse V1 (`ONEDNN_DEFAULT_AARCH64`)."""
    environ = os.environ if environ is None else environ
    if platform not in ("linux-x86_64", "linux-aarch64"):
        return False
    value = environment_value(environ, "TF_ENABLE_ONEDNN_OPTS")
    if value in TRUE_VALUES:
        return True
    if value in FALSE_VALUES:
        return False
    if platform == "linux-aarch64":
        return all((cpuinfo_field(cpuinfo, key) or "").strip() == want for key, want in ONEDNN_DEFAULT_AARCH64.items())
    return any(flag in flags for flag in ONEDNN_DEFAULT_FLAGS)


@dataclasses.dataclass(frozen=True)
class CpuKernels:
    """What a machine runs (see the module docstring).

    `flags`: an x86 CPU's feature flags (None: not Linux x86-64); `cap`:
    `isa_cap()`; `platform`: a `PLATFORMS` key; `onednn_opts`: whether
    TensorFlow's oneDNN rewrites are on (bfloat16 matmuls then go to oneDNN
    on CPUs with `ONEDNN_BFLOAT16_FLAGS`);
    `features`: an aarch64 CPU's `Features` (None elsewhere).
    """

    flags: frozenset | None
    cap: tuple | None = None
    platform: str = "linux-x86_64"
    onednn_opts: bool = True
    features: frozenset | None = None

    def runs(self, isa):
        """oneDNN's `mayiuse(isa)`: the CPU has the ISA's flags and the cap allows it."""
        needed = set(ISAS[isa])
        return (self.flags is not None and needed <= self.flags
                and (self.cap is None or needed <= set(ISAS[self.cap[1]])))

    def runs_any(self, isas):
        return any(self.runs(isa) for isa in isas)

    @property
    def isa(self):
        """The highest oneDNN ISA this CPU runs under the cap (`"none"` below SSE4.1 or off x86)."""
        return next((isa for isa in reversed(ISAS) if self.runs(isa)), "none")

    @property
    def bfloat16(self):
        """oneDNN has x86 bfloat16 kernels here."""
        return self.runs_any(BFLOAT16_ISAS)

    @property
    def exact_int8(self):
        """oneDNN's u8 x s8 sums are exact here (VNNI); elsewhere 8-bit weights can saturate."""
        return self.runs_any(EXACT_INT8_ISAS)

    def where(self):
        """`this CPU (oneDNN ISA avx2, capped by ONEDNN_MAX_CPU_ISA=AVX2)`, or the platform off x86: for messages."""
        if self.platform != "linux-x86_64":
            return f"this machine ({PLATFORMS[self.platform]})"
        capped = f", capped by {self.cap[0]}={self.cap[1].upper()}" if self.cap else ""
        return f"this CPU (oneDNN ISA {self.isa}{capped})"

    def int8_unsupported(self):
        """Why int8 graphs cannot be built or run here, or None (`INT8_REQUIREMENT`'s rule)."""
        return dataclasses.replace(INT8_REQUIREMENT, advice="int8 exports are built where they run",
                                   elsewhere="int8 exports are built and served on Linux x86-64").unmet(
            self, "an int8 export")

    def int8_note(self):
        """How int8 runs here, for a log line or an error: outputs, attention and weights."""
        notes = []
        if not self.bfloat16:
            notes.append("no AVX-512 (or AVX-VNNI-INT8 with AVX-NE-CONVERT): int8 matmuls write float32 and "
                         "attention runs in float32 (oneDNN has no bfloat16 kernels here)")
        if not self.exact_int8:
            notes.append("no AVX512-VNNI: weights scaled so that each pair of adjacent rows sums to at most 128, "
                         "so that oneDNN's 16-bit pair sums cannot saturate")
        if not notes:
            return f"{self.where()}: int8 matmuls with weights scaled per column, exact sums (VNNI), bfloat16 attention"
        return f"{self.where()} has " + "; ".join(notes)

    def bfloat16_matmul_unsupported(self, subject="bfloat16 matmuls"):
        """Why bfloat16 matmuls would abort here (TensorFlow sends them to oneDNN, which has no kernel), or None
        (`BFLOAT16_REQUIREMENT`'s rule)."""
        return BFLOAT16_REQUIREMENT.unmet(self, subject)

    def bfloat16_emulated(self):
        """bfloat16 arithmetic is emulated here (no AVX512-BF16 or AMX): slower than float32 where measured."""
        return not self.runs_any(("avx512_core_bf16", "avx2_vnni_2"))


def machine_kernels(cpuinfo, environ, macos):
    """The `CpuKernels` of a machine showing `cpuinfo` (the text of /proc/cpuinfo, None where absent), `environ`
    (a mapping) and `macos` (whether `MACOS_MARKER` exists): the inputs an export's graph reads too."""
    platform = platform_of(cpuinfo, macos)
    flags = frozenset(cpuinfo_field(cpuinfo, "flags").split()) if platform == "linux-x86_64" else None
    features = frozenset(cpuinfo_field(cpuinfo, "Features").split()) if platform == "linux-aarch64" else None
    cap = isa_cap(environ) if platform == "linux-x86_64" else None
    return CpuKernels(flags, cap, platform, onednn_opts_on(platform, flags, cpuinfo, environ), features)


def read_cpuinfo(path=CPUINFO):
    """The text of `path`, or None where it cannot be read (not Linux)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def this_cpu(environ=None):
    """The `CpuKernels` of the running machine, under the settings in `environ` (default `os.environ`)."""
    return machine_kernels(read_cpuinfo(), os.environ if environ is None else environ, os.path.exists(MACOS_MARKER))


@dataclasses.dataclass(frozen=True)
class CpuRequirement:
    """One of a graph's needs: any one of oneDNN ISAs `isas` on Linux x86-64, for `purpose` (what for), with
    `advice` (what to do where it is missing).

    `onednn_rewrites_only`: only where TensorFlow hands the ops to oneDNN
    (its rewrites on and the CPU with one of `ONEDNN_BFLOAT16_FLAGS`:
    bfloat16 matmuls otherwise run on Eigen, on any CPU and platform).
    Without it the need is x86 oneDNN's own (int8): refused on every other
    platform, with `elsewhere` as the advice.
    """

    isas: tuple
    purpose: str
    advice: str
    onednn_rewrites_only: bool = False
    elsewhere: str = "serve the float32 export (or a mixed_bfloat16 one) there"

    @classmethod
    def from_json(cls, record):
        """The requirement an export's metadata records (`to_json`)."""
        return cls(tuple(record["any_of_isa"]), record["for"], record.get("advice", "serve the float32 export"),
                   record.get("only_with_onednn_rewrites", False))

    def to_json(self):
        return {"any_of_isa": list(self.isas), "flags": {isa: list(ISAS[isa]) for isa in self.isas},
                "for": self.purpose, "advice": self.advice, "only_with_onednn_rewrites": self.onednn_rewrites_only,
                "platforms": "any (Eigen) but Linux x86-64 where oneDNN gets the ops" if self.onednn_rewrites_only
                else "Linux x86-64 only"}

    def x86_message(self, subject, missing, cap):
        """The message where Linux x86-64 lacks the ISAs; `missing` and `cap` are strings (or, in a graph,
        string tensors: the caller joins the parts)."""
        return [f"{subject} needs oneDNN ISA {' or '.join(self.isas)} for {self.purpose}, which this CPU lacks or "
                "ONEDNN_MAX_CPU_ISA excludes (missing CPU flags: ", missing, "; oneDNN ISA cap: ", cap,
                f"): {self.advice}"]

    def platform_message(self, subject, platform):
        """The message on a platform that cannot run it at all."""
        return (f"{subject} needs {self.purpose}, x86-64 kernels of oneDNN, which run on Linux x86-64 only, not on "
                f"{PLATFORMS[platform]}: {self.elsewhere}")

    def unmet(self, kernels, subject):
        """Why `kernels`' machine cannot run this (a message naming `subject`, e.g. "this int8 export"), or None."""
        if kernels.platform != "linux-x86_64":
            return None if self.onednn_rewrites_only else self.platform_message(subject, kernels.platform)
        if kernels.runs_any(self.isas):
            return None
        if self.onednn_rewrites_only and not (kernels.onednn_opts and any(
                flag in kernels.flags for flag in ONEDNN_BFLOAT16_FLAGS)):
            return None
        missing = " ".join(flag for flag in ISAS[self.isas[0]] if flag not in kernels.flags) or "none"
        return "".join(self.x86_message(subject, missing, kernels.cap[1] if kernels.cap else "none"))


# Messages that go into a graph hold no quote or backslash: TensorFlow's Assert prints its data escaped.
INT8_ADVICE = ("export it again on this machine (or with --int8_target=avx2, which runs on every x86-64 CPU with "
               "AVX2), or serve the float32 export")
BFLOAT16_ADVICE = ("set TF_ENABLE_ONEDNN_OPTS=0 (the bfloat16 kernels of Eigen, slower than float32 on such CPUs) or "
                   "use float32")
INT8_REQUIREMENT = CpuRequirement(INT8_BASE_ISAS, "int8 matmuls (u8 x s8 kernels of oneDNN)", INT8_ADVICE)
BFLOAT16_REQUIREMENT = CpuRequirement(BFLOAT16_ISAS, "bfloat16 matmuls (TensorFlow hands them to oneDNN here)",
                                      BFLOAT16_ADVICE, onednn_rewrites_only=True)


def first_unmet(requirements, kernels, subject):
    """The message of the first of `requirements` `kernels`' machine cannot run, or None: what an export's check
    says when it loads (`export.cpu_check`)."""
    return next((message for message in (r.unmet(kernels, subject) for r in requirements) if message), None)


class MachineError(ValueError):
    """This machine cannot run what was asked (a CLI prints it as one `error:` line)."""


def require(requirements, subject, kernels=None):
    """Raises `MachineError` with `first_unmet`'s message where `kernels` (default `this_cpu()`) cannot run
    `requirements`: what exports and training check before anything runs."""
    message = first_unmet(requirements, kernels or this_cpu(), subject)
    if message:
        raise MachineError(message)
