"""Which oneDNN kernels this CPU runs, read from its features: nothing is built or run to find out.

oneDNN picks its kernels by instruction set ("ISA"), and a kernel it has
none for is not an error TensorFlow catches: `_QuantizedMatMul` and oneDNN's
bfloat16 matmuls abort the process (`dnnl::error` at primitive creation,
outside the kernel's try block). So whether an int8 or bfloat16 graph can
run is decided here, from the CPU's flags (`/proc/cpuinfo`) and the cap
`ONEDNN_MAX_CPU_ISA` puts on them, as oneDNN 3.7 decides it
(`cpu_isa_traits.hpp`, `platform::has_data_type_support`):

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
by default on Linux where the CPU has AVX512-VNNI, AVX512-BF16, AVX-VNNI or
AMX (`onednn_opts`); without them a bfloat16 matmul runs on Eigen, which has
a (slow) kernel for every CPU.
"""

import dataclasses
import os
import platform

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
CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")  # oneDNN reads the first that is set
# What bfloat16 data needs (any one of them), and what exact u8 x s8 sums need.
BFLOAT16_ISAS = ("avx512_core", "avx2_vnni_2")
EXACT_INT8_ISAS = ("avx512_core_vnni",)
INT8_BASE_ISAS = ("avx2",)  # the least ISA int8 exports are tested on (oneDNN's int8 GEMM itself needs SSE4.1)
# The CPU flags with which TensorFlow turns its oneDNN rewrites on by default (Linux; `port.cc`).
ONEDNN_DEFAULT_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")
# How an int8 matmul's weight columns are scaled: `column`, by their largest magnitude (to 127); `paired`, also so
# that every pair of adjacent rows sums to at most 127 in magnitude before rounding (128 after): exact on CPUs whose
# oneDNN kernels add u8 x s8 products in 16-bit pairs (no VNNI).
WEIGHT_SCALES = ("column", "paired")


def read_flags(path="/proc/cpuinfo"):
    """The first `flags` line of `path` as a set, or None where there is none (not Linux, or not x86)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return None


def isa_cap(environ=None):
    """`(variable, oneDNN ISA name)` of the cap set in `environ` (default `os.environ`), or None: unset, `ALL`,
    `DEFAULT` or a name oneDNN does not know (it ignores those too)."""
    environ = os.environ if environ is None else environ
    for variable in CAP_VARIABLES:
        if variable in environ:
            value = environ[variable].strip().lower()
            value = ISA_ALIASES.get(value, value)
            return (variable, value) if value in ISAS else None
    return None


@dataclasses.dataclass(frozen=True)
class CpuKernels:
    """What oneDNN can run on a CPU of `flags` under `cap` (see the module docstring).

    `flags`: the CPU's feature flags (None: unknown); `cap`: `isa_cap()`;
    `machine`: `platform.machine()`; `onednn_opts`: whether TensorFlow's
    oneDNN rewrites are on (bfloat16 matmuls then run on oneDNN).
    """

    flags: frozenset | None
    cap: tuple | None = None
    machine: str = "x86_64"
    onednn_opts: bool = True

    def runs(self, isa):
        """oneDNN's `mayiuse(isa)`: the CPU has the ISA's flags and the cap allows it."""
        needed = set(ISAS[isa])
        return (self.flags is not None and needed <= self.flags
                and (self.cap is None or needed <= set(ISAS[self.cap[1]])))

    def runs_any(self, isas):
        return any(self.runs(isa) for isa in isas)

    @property
    def isa(self):
        """The highest oneDNN ISA this CPU runs under the cap (`"none"` below SSE4.1 or unknown)."""
        return next((isa for isa in reversed(ISAS) if self.runs(isa)), "none")

    @property
    def bfloat16(self):
        """oneDNN has bfloat16 kernels here."""
        return self.runs_any(BFLOAT16_ISAS)

    @property
    def exact_int8(self):
        """oneDNN's u8 x s8 sums are exact here (VNNI); elsewhere 8-bit weights can saturate."""
        return self.runs_any(EXACT_INT8_ISAS)

    def where(self):
        """`this CPU (oneDNN ISA avx2, capped by ONEDNN_MAX_CPU_ISA=AVX2)`: for messages."""
        capped = f", capped by {self.cap[0]}={self.cap[1].upper()}" if self.cap else ""
        return f"this CPU (oneDNN ISA {self.isa}{capped})"

    def int8_unsupported(self):
        """Why int8 graphs cannot run here, or None."""
        if self.machine.lower() not in ("x86_64", "amd64"):
            return f"int8 exports run on x86-64 CPUs only (oneDNN's int8 kernels), not {self.machine}"
        if self.flags is None:
            return "this CPU's features are unknown (no flags line in /proc/cpuinfo): int8 exports run on Linux x86-64"
        if not self.runs_any(INT8_BASE_ISAS):
            return f"{self.where()} has no AVX2: int8 exports need at least AVX2"
        return None

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

    def bfloat16_matmul_unsupported(self):
        """Why bfloat16 matmuls would abort here (TensorFlow sends them to oneDNN, which has no kernel), or None."""
        if self.onednn_opts and self.flags is not None and not self.bfloat16:
            return (f"{self.where()} has no bfloat16 kernels (AVX-512, or AVX-VNNI-INT8 with AVX-NE-CONVERT) and "
                    "TensorFlow's oneDNN rewrites are on")
        return None

    def bfloat16_emulated(self):
        """bfloat16 arithmetic is emulated here (no AVX512-BF16 or AMX): slower than float32 where measured."""
        return not self.runs_any(("avx512_core_bf16", "avx2_vnni_2"))


def onednn_opts_on(flags, environ=None, system=None):
    """Whether TensorFlow turns its oneDNN rewrites on: `TF_ENABLE_ONEDNN_OPTS` when set, else (Linux) on CPUs
    with one of `ONEDNN_DEFAULT_FLAGS`, (Windows) always."""
    environ = os.environ if environ is None else environ
    value = environ.get("TF_ENABLE_ONEDNN_OPTS", "").strip().lower()
    if value in ("1", "true"):
        return True
    if value in ("0", "false"):
        return False
    if (system or platform.system()) == "Windows":
        return True
    return bool(flags) and any(flag in flags for flag in ONEDNN_DEFAULT_FLAGS)


def this_cpu(environ=None):
    """The `CpuKernels` of the running machine, under the caps in `environ` (default `os.environ`)."""
    flags = read_flags()
    return CpuKernels(flags, isa_cap(environ), platform.machine(), onednn_opts_on(flags, environ))
