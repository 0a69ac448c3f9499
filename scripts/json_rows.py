"""Reading JSON lines (coop replay --json, coop sim --json), shared by the
scripts that check and plot them, and writing them (json_line, for the
scripts that emit their own). Standard library only."""

import json
import math
import sys


def die(prog, message):
    """Ends the program with status 2 and 'PROG: MESSAGE' on stderr."""
    print(f"{prog}: {message}", file=sys.stderr)
    sys.exit(2)


def no_constant(name):
    """json.loads' parse_constant: NaN, Infinity and -Infinity, which Python
    reads but JSON (RFC 8259) has not, are a bad line like any other."""
    raise ValueError(f"{name} is not JSON")


def json_rows(path, prog, what):
    """Yields (line number, object) for each non-blank line of the file path
    ('-': standard input). A file that cannot be read ends the program with
    'PROG: PATH: reason', a line that is not a JSON object with 'PROG:
    PATH:N: WHAT (reason)' (bytes that are not UTF-8, NaN or Infinity, and
    nesting too deep for the parser included)."""
    try:
        # bytes, decoded a line at a time, so that a line that is not UTF-8
        # is named like any other bad line
        f = sys.stdin.buffer if path == "-" else open(path, "rb")
    except OSError as e:
        die(prog, f"{path}: {e.strerror}")
    with f:
        try:
            for n, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    row = json.loads(raw.decode("utf-8"), parse_constant=no_constant)
                except (ValueError, RecursionError) as e:
                    die(prog, f"{path}:{n}: {what} ({e})")
                if not isinstance(row, dict):
                    die(prog, f"{path}:{n}: {what} (a JSON {type(row).__name__}, not an object)")
                yield n, row
        except OSError as e:  # a read error (EIO, a folder given as the file)
            die(prog, f"{path}: {e.strerror}")


def _finite(value):
    """value with every float that is NaN or infinite made None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def json_line(obj):
    """obj as one line of JSON (RFC 8259; sorted keys): a float that is NaN
    or infinite (a diverged loss, a ratio over 0) is null, as in coop's own
    rows. json.dumps wrote NaN and Infinity, which no JSON reader takes."""
    return json.dumps(_finite(obj), sort_keys=True, allow_nan=False)
