"""Process-wide TensorFlow runtime settings: thread pools and logical CPU devices.

Both must run before TensorFlow executes anything.
"""

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


def set_threads(intra_op=0, inter_op=0):
    """TensorFlow's thread pools: `intra_op` threads inside one op (matmuls), `inter_op` ops run at once.

    0 keeps TensorFlow's default (one per core each). Must run before
    TensorFlow executes anything. Results do not depend on it beyond float
    rounding of parallel reductions.
    """
    if intra_op:
        tf.config.threading.set_intra_op_parallelism_threads(intra_op)
    if inter_op:
        tf.config.threading.set_inter_op_parallelism_threads(inter_op)
