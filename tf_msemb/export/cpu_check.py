"""What an export needs of the machine, recorded in its metadata and checked in its graph when it loads.

oneDNN aborts the process on a kernel it lacks (`tf_msemb.cpus`): an int8
export written for AVX-512 would kill a TF Serving on an AVX2 machine at its
first request. So an export whose kernels need more than plain float32
carries a `CpuCheck`: a resource whose initializer applies `tf_msemb.cpus`'
rules in the graph, to the same inputs Python reads (`/proc/cpuinfo`,
`/proc/self/environ`, the macOS marker; each read only where it exists, so
a machine without `/proc` gets the platform's answer, never a
`NotFoundError`), and fails with one line naming what is missing and what to
use instead. Every loader runs resource initializers before anything else:
`tf.saved_model.load` (and so `TFSMLayer` and `hub.KerasLayer`) while
restoring, TF Serving's Session loader in the MetaGraph's init op, before the
warm-up requests.

The environment is the process's initial one (`/proc/self/environ`): a
variable a program sets for itself after it starts is not seen.
"""

import uuid

import tensorflow as tf

from tf_msemb.cpus import BFLOAT16_REQUIREMENT
from tf_msemb.cpus import CAP_VARIABLES
from tf_msemb.cpus import CPUINFO
from tf_msemb.cpus import ENVIRON
from tf_msemb.cpus import FALSE_VALUES
from tf_msemb.cpus import INT8_ADVICE
from tf_msemb.cpus import ISA_ALIASES
from tf_msemb.cpus import ISAS
from tf_msemb.cpus import MACOS_MARKER
from tf_msemb.cpus import ONEDNN_BFLOAT16_FLAGS
from tf_msemb.cpus import ONEDNN_DEFAULT_FLAGS
from tf_msemb.cpus import PLATFORMS
from tf_msemb.cpus import TRUE_VALUES
from tf_msemb.cpus import CpuRequirement


def int8_requirements(options):
    """The `CpuRequirement`s of an int8 graph built with `Int8Options` `options` (resolved: `for_cpu`)."""
    return [CpuRequirement(tuple(isas), purpose, INT8_ADVICE) for isas, purpose in options.cpu_requirements()]


def bfloat16_requirements():
    """The `CpuRequirement` of a bfloat16 export: oneDNN's bfloat16 matmuls, where TensorFlow sends them there."""
    return [BFLOAT16_REQUIREMENT]


def _field_pattern(name):
    """`cpus.cpuinfo_field` as one regular expression over the whole text: the first `<name>[ \\t]*:` line."""
    return f"(?s)(?:[^\\n]*\\n)*?{name}[ \\t]*:([^\\n]*)(?:\\n.*)?"


def _field_words(cpuinfo, name):
    """`(present, " w1 w2 ... ")`: whether `cpuinfo` has a `name` line, and its words space-padded."""
    pattern = _field_pattern(name)
    present = tf.strings.regex_full_match(cpuinfo, pattern)
    words = tf.strings.join([" ", tf.strings.regex_replace(cpuinfo, pattern, r"\1"), " "])
    return present, tf.strings.regex_replace(words, "\\s+", " ")


def _has(words, word):
    """Whether space-padded `words` holds `word`."""
    return tf.strings.regex_full_match(words, f"(?s).* {word} .*")


def _environment_value(environ, variable):
    """`cpus.environment_value` over NUL-separated `environ`: the first `variable=` entry's value, lower-cased."""
    pattern = f"(?s)(?:[^\\x00]*\\x00)*?{variable}=([^\\x00]*)(?:\\x00.*)?"
    found = tf.strings.regex_full_match(environ, pattern)
    return tf.where(found, tf.strings.lower(tf.strings.regex_replace(environ, pattern, r"\1")), "")


def _cap(environ):
    """`cpus.isa_cap`'s ISA name, or "" (unset, empty or unknown: oneDNN ignores it)."""
    value = tf.constant("")
    for variable in reversed(CAP_VARIABLES):  # the first set and non-empty wins
        own = _environment_value(environ, variable)
        value = tf.where(tf.strings.length(own) > 0, own, value)
    for alias, name in ISA_ALIASES.items():
        value = tf.where(tf.equal(value, alias), name, value)
    return tf.where(tf.reduce_any(tf.equal(value, list(ISAS))), value, "")


def _runs(flags, cap, isa):
    """`CpuKernels.runs`: oneDNN's `mayiuse(isa)` on a CPU of space-padded `flags` under `cap`."""
    present = tf.reduce_all(tf.stack([_has(flags, flag) for flag in ISAS[isa]]))
    allowing = [name for name, needed in ISAS.items() if set(ISAS[isa]) <= set(needed)]
    return present & ((cap == "") | tf.reduce_any(tf.equal(cap, allowing)))


def _either(value, *words):
    return tf.reduce_any(tf.stack([tf.equal(value, word) for word in words]))


class _Machine:
    """`cpus.machine_kernels` in a graph: the platform, flags, cap and (on x86-64) rewrites, as tensors."""

    def __init__(self, cpuinfo, has_cpuinfo, macos, environ):
        self.x86, self.flags = _field_words(cpuinfo, "flags")
        arm, _ = _field_words(cpuinfo, "Features")
        self.x86 &= has_cpuinfo
        self.arm = has_cpuinfo & arm & tf.logical_not(self.x86)
        self.linux_other = has_cpuinfo & tf.logical_not(self.x86 | self.arm)
        self.macos = tf.logical_not(has_cpuinfo) & macos
        self.cap = tf.where(self.x86, _cap(environ), "")
        value = _environment_value(environ, "TF_ENABLE_ONEDNN_OPTS")
        default = tf.reduce_any(tf.stack([_has(self.flags, flag) for flag in ONEDNN_DEFAULT_FLAGS]))
        # Only x86-64's decisions read the rewrites (`CpuRequirement.unmet`): aarch64's default is not computed.
        self.rewrites = self.x86 & (_either(value, *TRUE_VALUES) | (
            default & tf.logical_not(_either(value, *FALSE_VALUES))))

    def platform(self):
        """The `cpus.PLATFORMS` key."""
        return tf.where(self.x86, "linux-x86_64", tf.where(self.arm, "linux-aarch64", tf.where(
            self.linux_other, "linux-other", tf.where(self.macos, "macos", "other"))))

    def unmet(self, requirement, subject):
        """`CpuRequirement.unmet`: `(ok, message)` tensors."""
        runs = tf.reduce_any(tf.stack([_runs(self.flags, self.cap, isa) for isa in requirement.isas]))
        first = ISAS[requirement.isas[0]]
        missing = tf.strings.reduce_join(tf.boolean_mask(list(first), tf.logical_not(tf.stack(
            [_has(self.flags, flag) for flag in first]))), separator=" ")
        x86_message = tf.strings.join(requirement.x86_message(
            subject, tf.where(missing == "", "none", missing), tf.where(self.cap == "", "none", self.cap)))
        if requirement.onednn_rewrites_only:
            handed = self.rewrites & tf.reduce_any(tf.stack([_has(self.flags, f) for f in ONEDNN_BFLOAT16_FLAGS]))
            return tf.logical_not(self.x86) | runs | tf.logical_not(handed), x86_message
        platform = self.platform()
        elsewhere = tf.constant("")
        for key in PLATFORMS:
            elsewhere = tf.where(tf.equal(platform, key), requirement.platform_message(subject, key), elsewhere)
        return self.x86 & runs, tf.where(self.x86, x86_message, elsewhere)


def graph_first_unmet(requirements, subject, cpuinfo, has_cpuinfo, macos, environ):
    """`cpus.first_unmet` in a graph, on the inputs as tensors: `(ok, message of the first unmet requirement)`."""
    machine = _Machine(cpuinfo, has_cpuinfo, macos, environ)
    ok, message = tf.constant(True), tf.constant("")
    for requirement in reversed(requirements):
        own_ok, own_message = machine.unmet(requirement, subject)
        message = tf.where(own_ok, message, own_message)
        ok &= own_ok
    return ok, message


def _present(path):
    """Whether `path` exists (a match of itself), as a tensor: no read, so nothing fails where it is absent."""
    return tf.size(tf.io.matching_files(path)) > 0


def _read_if_present(path):
    """`(text, present)` of `path`: read only where it exists, so no read fails (and no error is logged)."""
    matches = tf.io.matching_files(path)
    present = tf.size(matches) > 0
    return tf.cond(present, lambda: tf.io.read_file(matches[0]), lambda: tf.constant("")), present


def check_cpu(requirements, precision):
    """In a traced function: asserts every one of `requirements` on this machine; returns the assert to depend on."""
    cpuinfo, has_cpuinfo = _read_if_present(CPUINFO)
    environ, _ = _read_if_present(ENVIRON)
    macos = _present(MACOS_MARKER)
    ok, message = graph_first_unmet(requirements, f"this {precision} export", cpuinfo, has_cpuinfo, macos, environ)
    return [tf.debugging.Assert(ok, [message])]


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
