"""What an export needs of the CPU, recorded in its metadata and checked in its graph when it loads.

oneDNN aborts the process on a kernel it lacks (`inference.cpu_features`): an
int8 export written for AVX-512 would kill a TF Serving on an AVX2 machine
at its first request. So an export whose kernels need more than plain
x86-64 carries a `CpuCheck`: a resource whose initializer reads the CPU's
flags (`/proc/cpuinfo`) and oneDNN's ISA cap (`ONEDNN_MAX_CPU_ISA` in
`/proc/self/environ`) in the graph and fails with one line naming the
missing feature and what to use instead. Every loader runs resource
initializers before anything else: `tf.saved_model.load` (and so
`TFSMLayer` and `hub.KerasLayer`) while restoring, TF Serving's Session
loader in the MetaGraph's init op, before the warm-up requests. Where
`/proc/cpuinfo` has no flags line (not Linux x86) the check passes: the ops
themselves then decide.
"""

import dataclasses
import uuid

import tensorflow as tf

from tf_msemb.inference.cpu_features import BFLOAT16_ISAS
from tf_msemb.inference.cpu_features import CAP_VARIABLES
from tf_msemb.inference.cpu_features import ISAS
from tf_msemb.inference.cpu_features import ONEDNN_DEFAULT_FLAGS
from tf_msemb.inference.cpu_features import ISA_ALIASES

# What to do instead, by the kind of export.
INT8_ADVICE = ("export it again on this machine (or with --int8_target=avx2, which runs on every x86-64 CPU with "
               "AVX2), or serve the float32 export")
BFLOAT16_ADVICE = ("set TF_ENABLE_ONEDNN_OPTS=0 (Eigen's bfloat16 kernels, slower than float32 on such CPUs) or "
                   "serve the float32 or int8 export")


@dataclasses.dataclass(frozen=True)
class CpuRequirement:
    """One of an export's needs: any one of oneDNN ISAs `isas`, `purpose` (what for), `advice` (what to do where it
    is missing); with `onednn_rewrites_only`, only where TensorFlow's oneDNN rewrites are on (bfloat16 matmuls
    otherwise run on Eigen, on any CPU)."""

    isas: tuple
    purpose: str
    advice: str
    onednn_rewrites_only: bool = False

    def to_json(self):
        return {"any_of_isa": list(self.isas), "flags": {isa: list(ISAS[isa]) for isa in self.isas},
                "for": self.purpose, "only_with_onednn_rewrites": self.onednn_rewrites_only}

    def message(self, precision):
        isas = " or ".join(self.isas)
        return (f"this {precision} export needs oneDNN ISA {isas} for {self.purpose}, which this CPU lacks or "
                f"ONEDNN_MAX_CPU_ISA excludes")


def int8_requirements(options):
    """The `CpuRequirement`s of an int8 graph built with `Int8Options` `options` (resolved: `for_cpu`)."""
    return [CpuRequirement(tuple(isas), purpose, INT8_ADVICE) for isas, purpose in options.cpu_requirements()]


def bfloat16_requirements():
    """The `CpuRequirement` of a bfloat16 export: oneDNN's bfloat16 matmuls, where TensorFlow sends them there."""
    return [CpuRequirement(BFLOAT16_ISAS, "bfloat16 matmuls (TensorFlow's oneDNN rewrites are on)", BFLOAT16_ADVICE,
                           onednn_rewrites_only=True)]


def _has(text, word):
    """Whether space-separated `text` holds `word`."""
    return tf.strings.regex_full_match(text, f"(?s).* {word} .*")


def _environment_value(environ, variable):
    """The value of `variable` in NUL-separated `environ` (lowercase), or "" where unset."""
    pattern = f"(?s)(?:|.*\\x00){variable}=([^\\x00]*)(?:\\x00.*|)"
    found = tf.strings.regex_full_match(environ, pattern)
    return tf.where(found, tf.strings.lower(tf.strings.regex_replace(environ, pattern, r"\1")), "")


def _cap(environ):
    """oneDNN's ISA cap in `environ`, an `ISAS` name, or "" (unset or unknown: oneDNN ignores it)."""
    value = _environment_value(environ, CAP_VARIABLES[1])
    value = tf.where(tf.strings.length(_environment_value(environ, CAP_VARIABLES[0])) > 0,
                     _environment_value(environ, CAP_VARIABLES[0]), value)
    for alias, name in ISA_ALIASES.items():
        value = tf.where(tf.equal(value, alias), name, value)
    return tf.where(tf.reduce_any(tf.equal(value, list(ISAS))), value, "")


def _runs(flags, cap, isa):
    """oneDNN's `mayiuse(isa)` on a CPU of space-padded `flags` under `cap`."""
    present = tf.reduce_all(tf.stack([_has(flags, flag) for flag in ISAS[isa]]))
    allowing = [name for name, needed in ISAS.items() if set(ISAS[isa]) <= set(needed)]
    return present & ((cap == "") | tf.reduce_any(tf.equal(cap, allowing)))


def _onednn_rewrites(flags, environ):
    """TensorFlow's oneDNN rewrites on (`cpu_features.onednn_opts_on`, Linux)."""
    value = _environment_value(environ, "TF_ENABLE_ONEDNN_OPTS")
    default = tf.reduce_any(tf.stack([_has(flags, flag) for flag in ONEDNN_DEFAULT_FLAGS]))
    return (tf.equal(value, "1") | tf.equal(value, "true")
            | (default & tf.logical_not(tf.equal(value, "0") | tf.equal(value, "false"))))


def check_cpu(requirements, precision):
    """In a traced function: asserts every one of `requirements` on this CPU; returns the asserts to depend on."""
    cpuinfo = tf.io.read_file("/proc/cpuinfo")
    flags_line = "(?s)(?:.*\\n)?flags\\s*:([^\\n]*)(?:\\n.*|)"
    known = tf.strings.regex_full_match(cpuinfo, flags_line)
    flags = tf.strings.join([" ", tf.strings.regex_replace(cpuinfo, flags_line, r"\1"), " "])
    flags = tf.strings.regex_replace(flags, "\\s+", " ")
    environ = tf.io.read_file("/proc/self/environ")
    cap = _cap(environ)
    asserts = []
    for requirement in requirements:
        ok = tf.reduce_any(tf.stack([_runs(flags, cap, isa) for isa in requirement.isas]))
        if requirement.onednn_rewrites_only:
            ok |= tf.logical_not(_onednn_rewrites(flags, environ))
        first = ISAS[requirement.isas[0]]
        missing = tf.strings.reduce_join(tf.boolean_mask(list(first), tf.logical_not(tf.stack(
            [_has(flags, flag) for flag in first]))), separator=" ")
        message = tf.strings.join([
            requirement.message(precision), " (missing CPU flags: ", tf.where(missing == "", "none", missing),
            "; oneDNN ISA cap: ", tf.where(cap == "", "none", cap), "): ", requirement.advice])
        asserts.append(tf.debugging.Assert(tf.logical_not(known) | ok, [message]))
    return asserts


class CpuCheck(tf.saved_model.experimental.TrackableResource):
    """A resource whose initializer runs `check_cpu(requirements)`: every loader runs it before serving."""

    def __init__(self, requirements, precision):
        self.requirements = list(requirements)
        self.precision = precision
        self._name = f"tf_msemb_cpu_check_{uuid.uuid4().hex[:12]}"
        super().__init__()

    def _create_resource(self):
        return tf.raw_ops.VarHandleOp(dtype=tf.bool, shape=[], shared_name=self._name)

    def _initialize(self):
        with tf.control_dependencies(check_cpu(self.requirements, self.precision)):
            return tf.raw_ops.AssignVariableOp(resource=self.resource_handle, value=True)
