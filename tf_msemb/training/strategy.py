"""Distribution strategies by name, and fake multi-device CPUs for laptops and tests."""

import json
import os
import socket

import gin
import tensorflow as tf

STRATEGIES = ("default", "one_device", "mirrored", "multi_worker", "tpu")


class StrategyError(RuntimeError):
    """A strategy cannot be set up on this machine (no TPU, bad `TF_CONFIG`)."""


def _local_devices():
    gpus = tf.config.list_logical_devices("GPU")
    return [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]


def _multi_worker(communication):
    config = os.environ.get("TF_CONFIG")
    if not config:
        raise StrategyError("strategy 'multi_worker' needs TF_CONFIG (cluster 'worker' addresses and this task).")
    try:
        task = json.loads(config)["task"]
    except (ValueError, KeyError) as e:
        raise StrategyError(f"TF_CONFIG is not valid JSON with a 'task' entry: {e}") from None
    options = tf.distribute.experimental.CommunicationOptions(
        implementation={
            "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
            "ring": tf.distribute.experimental.CommunicationImplementation.RING,
            "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
        }[communication]
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    print(f"Worker {task.get('type')}:{task.get('index')} of {strategy.num_replicas_in_sync} replicas", flush=True)
    return strategy


def _reachable(address, timeout=10.0):
    """Whether `grpc://host:port` accepts a TCP connection (connecting to nothing would hang)."""
    host, _, port = address[len("grpc://"):].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def _tpu(address):
    if address and address.startswith("grpc://") and not _reachable(address):
        raise StrategyError(f"No TPU found at {address!r}: nothing accepts connections there.")
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, ImportError, OSError, tf.errors.OpError) as e:
        where = f"at {address!r}" if address else "on this machine (no make_strategy.tpu_address given)"
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise StrategyError(f"No TPU found {where}: {first_line}") from None
    return tf.distribute.TPUStrategy(resolver)


@gin.configurable
def make_strategy(kind="default", devices=None, tpu_address=None, communication="auto"):
    """Builds the `tf.distribute.Strategy` named `kind`.

    - `"default"`: no distribution (one device, whatever TensorFlow picks).
    - `"one_device"`: `OneDeviceStrategy` on `devices[0]` (default: first GPU, else CPU).
    - `"mirrored"`: `MirroredStrategy` over `devices` (default: every local
      GPU, else every logical CPU; see `tf_msemb.runtime.split_cpu`).
    - `"multi_worker"`: `MultiWorkerMirroredStrategy`; the cluster and this
      worker's role come from the `TF_CONFIG` environment variable.
    - `"tpu"`: `TPUStrategy` on the TPU at `tpu_address` (a name or
      `grpc://host:port`; None = the local TPU VM). Fails at once when
      there is no TPU.

    Args:
        communication: collective implementation for `"multi_worker"`:
            `"auto"`, `"ring"` (gRPC, works on CPU) or `"nccl"` (GPUs).
    """
    if kind == "default":
        return tf.distribute.get_strategy()
    if kind == "one_device":
        return tf.distribute.OneDeviceStrategy((devices or _local_devices())[0])
    if kind == "mirrored":
        return tf.distribute.MirroredStrategy(devices or _local_devices())
    if kind == "multi_worker":
        return _multi_worker(communication)
    if kind == "tpu":
        return _tpu(tpu_address)
    raise StrategyError(f"Unknown strategy {kind!r}; choose one of {', '.join(STRATEGIES)}.")


def is_chief(strategy):
    """Whether this worker writes the run's files (always, outside multi-worker training)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    return resolver.task_type == "chief" or (resolver.task_type == "worker" and resolver.task_id == 0)


# Seeds of replica r's dropout generators move by r times this (a prime far
# above the replica counts, so no two generators of one model coincide).
_SEED_STRIDE = 1_000_003


def decorrelate_dropout(strategy, seed_states):
    """Gives each replica its own dropout masks; call after restoring a checkpoint.

    Keras' seed generators are mirrored variables: every replica starts from
    the same `[seed, counter]` state and draws the same masks for different
    examples. This moves the seed of replica r's own copy by r x stride
    (an assignment in replica context changes only that copy). Replica 0
    keeps the state a one-device run has, and checkpoints save replica 0's
    copy, so a resumed run calls this again and continues exactly.
    """
    if strategy.num_replicas_in_sync == 1 or not seed_states:
        return

    def offset():
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        for state in seed_states:
            shift = tf.cast(tf.stack([replica * _SEED_STRIDE, 0]), state.dtype)
            state.assign(state.value + shift)

    strategy.run(tf.function(offset))
