"""One input pipeline per replica, with iterators that checkpoints can hold.

`strategy.distribute_datasets_from_function` returns an iterator that
`tf.train.Checkpoint` cannot save, so a resumed run would see other data
than an uninterrupted one. `ReplicaInput` instead builds this worker's
replicas' pipelines itself (each with its `tf.distribute.InputContext`, so
files or records are split exactly as the strategy would split them),
keeps their plain `tf.data` iterators (checkpointable: shuffle buffers and
positions included) and hands each replica its batch through
`experimental_distribute_values_from_function`. On TPU the strategy's own
distributed dataset is used and the input position is not checkpointed.
"""

import tensorflow as tf


def _is_tpu(strategy):
    return isinstance(strategy, (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy))


def local_replica_ids(strategy):
    """Global replica ids of the replicas on this worker."""
    try:
        local = len(strategy.extended.worker_devices)
    except RuntimeError:  # the default (no-op) strategy has no device list
        return [0]
    resolver = getattr(strategy, "cluster_resolver", None)
    task_id = (resolver.task_id or 0) if resolver is not None and resolver.task_type else 0
    return list(range(task_id * local, task_id * local + local))


class ReplicaInput:
    """Per-replica batches of `dataset_fn(input_context)` for `strategy.run`.

    Args:
        strategy: the `tf.distribute.Strategy` of the run.
        global_batch_size: examples per step over all replicas; must divide
            evenly among them.
        dataset_fn: `tf.distribute.InputContext -> tf.data.Dataset` of
            per-replica batches (`input_context.get_per_replica_batch_size`).
            A dataset's `source_files` attribute, when set, is collected into
            `self.source_files` (the shards this input reads), and its
            `corpora` into `self.corpora` (the manifests, globs or files named
            by the configuration, which exports record).
    """

    def __init__(self, strategy, global_batch_size, dataset_fn):
        replicas = strategy.num_replicas_in_sync
        if global_batch_size % replicas:
            raise ValueError(f"Global batch {global_batch_size} is not divisible by {replicas} replicas.")
        self.strategy = strategy
        if _is_tpu(strategy):
            self._distributed = iter(strategy.distribute_datasets_from_function(dataset_fn))
            self.iterators, self.source_files, self.corpora = [], [], []
            return
        self._distributed = None
        replica_ids = local_replica_ids(strategy)
        self._first_id = replica_ids[0]
        datasets = [
            dataset_fn(tf.distribute.InputContext(replicas, replica_id, replicas)) for replica_id in replica_ids
        ]
        self.source_files = sorted({path for dataset in datasets for path in getattr(dataset, "source_files", [])})
        self.corpora = list(dict.fromkeys(corpus for dataset in datasets for corpus in getattr(dataset, "corpora", [])))
        self.iterators = [iter(dataset) for dataset in datasets]

    @property
    def checkpointable(self):
        """Whether `iterators` hold the whole input position."""
        return self._distributed is None

    def next_batch(self):
        """The next step's batch as per-replica values (works inside `tf.function`)."""
        if self._distributed is not None:
            return next(self._distributed)
        batches = [next(iterator) for iterator in self.iterators]
        return self.strategy.experimental_distribute_values_from_function(
            lambda context: batches[context.replica_id_in_sync_group - self._first_id]
        )

    def __iter__(self):
        while True:
            yield self.next_batch()


class TaskInputs:
    """The inputs of several tasks (`{name: ReplicaInput}`), read together or one task at a time.

    `next_batch()` is `{name: batch}` of every task (a summed multi-task
    step); `tasks[name].next_batch()` one task's. `iterators` lists every
    task's in task order, so a checkpoint holds each task's input position.
    """

    def __init__(self, tasks):
        self.tasks = dict(tasks)
        self.iterators = [iterator for task in self.tasks.values() for iterator in task.iterators]
        self.source_files = sorted({path for task in self.tasks.values() for path in task.source_files})
        self.corpora = list(dict.fromkeys(corpus for task in self.tasks.values() for corpus in task.corpora))

    @property
    def checkpointable(self):
        return all(task.checkpointable for task in self.tasks.values())

    def next_batch(self):
        return {name: task.next_batch() for name, task in self.tasks.items()}
