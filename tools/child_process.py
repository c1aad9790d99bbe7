"""Running one measurement of a benchmark script in a process of its own (so its peak RSS is its own)."""

import json
import subprocess


def run_json(command, what):
    """Runs `command` and returns the JSON object on the last line of its stdout.

    If the child fails, this process ends with `error: <what> failed:` and the end of the child's stderr.
    """
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"error: {what} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])
