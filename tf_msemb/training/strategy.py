"""Distribution strategies by name, and fake multi-device CPUs for laptops and tests."""

import gin
import tensorflow as tf


def split_cpu(num_devices):
    """Splits the CPU into `num_devices` logical devices.

    Must run before TensorFlow executes anything; lets `MirroredStrategy`
    run with several replicas on one CPU (big_vision-style fake devices).
    """
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)]
    )


@gin.configurable
def make_strategy(kind="default", devices=None):
    """`"default"` (one device) or `"mirrored"` (all local GPUs, else all logical CPUs).

    Args:
        kind: strategy name.
        devices: explicit device list for `"mirrored"`.
    """
    if kind == "default":
        return tf.distribute.get_strategy()
    if kind == "mirrored":
        if devices is None:
            gpus = tf.config.list_logical_devices("GPU")
            devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
        return tf.distribute.MirroredStrategy(devices)
    raise ValueError(f"Unknown strategy {kind!r}; choose 'default' or 'mirrored'.")
