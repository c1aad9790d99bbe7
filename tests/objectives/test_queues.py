import keras
import numpy as np

from tf_msemb.objectives.queues import enqueue
from tf_msemb.objectives.queues import filled_slots


def _state(size, dim, count=2):
    queues = [keras.Variable(np.zeros((size, dim), np.float32), trainable=False) for _ in range(count)]
    return queues, keras.Variable(0, dtype="int32", trainable=False), keras.Variable(0, dtype="int32", trainable=False)


def test_queues_advance_together_and_wrap_past_the_end():
    queues, pointer, filled = _state(size=5, dim=2)
    first = np.arange(6, dtype=np.float32).reshape(3, 2)
    enqueue(queues, [first, -first], pointer, filled)
    np.testing.assert_array_equal(filled_slots(queues[0], filled).numpy(), [True, True, True, False, False])
    second = 100 + np.arange(8, dtype=np.float32).reshape(4, 2)
    enqueue(queues, [second, -second], pointer, filled)
    # Slots 3, 4, then 0, 1 take the second batch; slot 2 keeps the first batch's last row.
    expected = np.stack([second[2], second[3], first[2], second[0], second[1]])
    np.testing.assert_array_equal(queues[0].numpy(), expected)
    np.testing.assert_array_equal(queues[1].numpy(), -expected)
    assert int(pointer.numpy()) == 2 and int(filled.numpy()) == 5
    assert filled_slots(queues[0], filled).numpy().all()


def test_a_batch_larger_than_the_queue_keeps_its_newest_rows():
    queues, pointer, filled = _state(size=3, dim=1, count=1)
    enqueue(queues, [np.arange(7, dtype=np.float32)[:, None]], pointer, filled)
    np.testing.assert_array_equal(queues[0].numpy()[:, 0], [4, 5, 6])
    assert int(pointer.numpy()) == 0 and int(filled.numpy()) == 3
