"""What every command line of tf_msemb shares: quiet start-up, and one `error:` line for mistakes a user can fix.

Each command (`tf_msemb.train`, `tf_msemb.evaluate`, `tools/*.py`) imports
this module before anything that imports TensorFlow, and ends with
`cli.run(main)`. Without `--verbosity` (or `-v`) on the command line:

- TensorFlow's C++ log is off (`TF_CPP_MIN_LOG_LEVEL=3`: no oneDNN,
  cpu_feature_guard or cuInit lines) unless the environment already sets
  it; the lines its libraries print while they load (cudart_stub and
  absl's "All log messages before absl::InitializeLog()") ignore that
  variable, so TensorFlow is imported here with file descriptor 2 pointed
  at /dev/null (`native_logs_off`, for other such libraries too);
  SentencePiece's C++ log shows warnings and errors only;
- absl's Python log shows warnings and errors only;
- an error `tf_msemb.training.errors.one_line` recognizes (bad input,
  configuration, missing files or packages, NaN loss, no TPU, ...) ends the
  command with `error: <one line>` on stderr and exit status 1; any other
  exception keeps its traceback.

With `--verbosity` all of these stay as TensorFlow and absl make them, and
every error shows its traceback.
"""

import contextlib
import os
import re
import sys

from absl import app
from absl import flags
from absl import logging


def verbosity_requested(args):
    """Whether command-line `args` set absl's `--verbosity` (or `-v`), before absl has parsed them."""
    return any(re.fullmatch(r"--?(v|verbosity)(=.*)?", arg) for arg in args)


@contextlib.contextmanager
def native_logs_off():
    """Points file descriptor 2 at /dev/null inside the block (libraries that log from C++ as they load or
    start, such as TFLite's "Created TensorFlow Lite XNNPACK delegate"); a no-op with `--verbosity`."""
    if verbosity_requested(sys.argv[1:]):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


if not verbosity_requested(sys.argv[1:]):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with native_logs_off():
        import tensorflow  # noqa: F401
    import sentencepiece

    sentencepiece.set_min_log_level(1)  # its normalization-table builder's INFO lines

from tf_msemb.training.errors import one_line  # noqa: E402 -- imports TensorFlow, so after the lines above


def call(main, argv, verbose):
    """`main(argv)`; unless `verbose`, a recognized error becomes `SystemExit("error: ...")` (status 1)."""
    try:
        return main(argv)
    except Exception as e:  # noqa: BLE001 -- only errors `one_line` recognizes are shortened
        message = None if verbose else one_line(e)
        if message is None:
            raise
        if getattr(e, "stderr", None):  # a child interpreter's own messages (InterpreterError), before our line
            sys.stderr.write(e.stderr.rstrip("\n") + "\n")
        raise SystemExit(f"error: {message}") from None


def run(main, beam_arguments=False):
    """Parses the flags and runs `main(argv)` with absl's `app.run`, quiet and with one-line errors.

    With `beam_arguments`, arguments that are not our flags are left in
    `argv` (a Beam pipeline's options, such as `--runner`) instead of refused.
    `--help` prints the command's docstring as written: absl %-formats it
    (`%s` becomes the script's path, so `id % shards` would lose text), and
    its `%` are escaped here first.
    """
    main_module = sys.modules["__main__"]
    if main_module.__doc__:
        main_module.__doc__ = main_module.__doc__.replace("%", "%%")

    def quiet_main(argv):
        verbose = flags.FLAGS["verbosity"].present
        if not verbose:
            logging.set_verbosity(logging.WARNING)
        return call(main, argv, verbose)

    app.run(quiet_main, flags_parser=(lambda argv: flags.FLAGS(argv, known_only=True)) if beam_arguments else
            app.parse_flags_with_usage)
