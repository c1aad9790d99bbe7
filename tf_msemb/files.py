"""Files written whole: under a temporary name, then renamed, so a run killed while writing leaves the
previous file or none, never a part (any TensorFlow file system: local, `gs://`, ...)."""

import io
import json
import os
import shutil
import uuid

import numpy as np
import tensorflow as tf


def write_atomically(path, write):
    """Calls `write(temporary path)`, then renames the file to `path` (replacing a previous attempt's)."""
    partial = f"{path}.partial-{uuid.uuid4().hex}"
    try:
        write(partial)
        tf.io.gfile.rename(partial, path, overwrite=True)
    finally:
        if tf.io.gfile.exists(partial):
            tf.io.gfile.remove(partial)


def write_npz_atomically(path, **arrays):
    """`np.savez` of `arrays` to `path` (any TensorFlow file system), whole or not at all."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)

    def write(partial):
        with tf.io.gfile.GFile(partial, "wb") as f:
            f.write(buffer.getvalue())

    write_atomically(path, write)


def read_npz(path):
    """The arrays `write_npz_atomically` wrote to `path`, as a dict."""
    with tf.io.gfile.GFile(path, "rb") as f:
        return dict(np.load(io.BytesIO(f.read())))


def write_json_atomically(path, content, indent=None, ensure_ascii=True):
    """`json.dump` of `content` to `path`, whole or not at all."""
    text = json.dumps(content, indent=indent, ensure_ascii=ensure_ascii)

    def write(partial):
        with tf.io.gfile.GFile(partial, "w") as f:
            f.write(text)

    write_atomically(path, write)


def write_directory_atomically(directory, write):
    """Calls `write(temporary directory)` (a fresh `<directory>.partial`), then replaces `directory` with it; a
    failed write leaves the previous directory or none (local file systems)."""
    partial = f"{directory.rstrip(os.sep)}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    try:
        write(partial)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(directory, ignore_errors=True)
    os.rename(partial, directory)
    return directory
