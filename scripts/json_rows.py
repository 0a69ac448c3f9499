"""Reading JSON lines (coop replay --json, coop sim --json), shared by the
scripts that check and plot them, and writing them (json_line, for the
scripts that emit their own). Standard library only.

Each kind of row has one spec here (SIM_ROW, REPLAY_ROW): a {key: check} of
every field a script reads, a check returning what the value should have
been ("not a string") or None. json_rows(..., check=sim_row_error) holds
each row to its spec, so a bad row is one line naming the file, the line,
the key and its value: never a traceback further on, nor a figure or a
verdict drawn from a wrong value."""

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


def json_rows(path, prog, what, check=None, table_of=None):
    """Yields (line number, object) for each non-blank line of the file path
    ('-': standard input). A file that cannot be read ends the program with
    'PROG: PATH: reason', a line that is not a JSON object with 'PROG:
    PATH:N: WHAT (reason)' (bytes that are not UTF-8, NaN or Infinity, and
    nesting too deep for the parser included), and a row that check (say
    sim_row_error) finds wrong with 'PROG: PATH:N: what check said'.
    table_of: the command whose --json rows these are ('coop sim'): a line
    of words, the table it prints without --json, is told to run it so."""
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
                    hint = ("a table? run %s with --json; " % table_of
                            if table_of and raw[:1].isalpha() else "")
                    die(prog, f"{path}:{n}: {what} ({hint}{e})")
                if not isinstance(row, dict):
                    die(prog, f"{path}:{n}: {what} (a JSON {type(row).__name__}, not an object)")
                why = check(row) if check else None
                if why:
                    die(prog, f"{path}:{n}: {why}")
                yield n, row
        except OSError as e:  # a read error (EIO, a folder given as the file)
            die(prog, f"{path}: {e.strerror}")


class Spec:
    """The fields of one tool's rows: tool names it in messages ('coop sim
    --json'); required and optional map each key to its check; a row with
    the keys of signature is taken for one of tool's."""

    def __init__(self, tool, signature, required, optional):
        self.tool, self.signature = tool, signature
        self.required, self.optional = required, optional


def shown(value):
    """value as JSON, cut to 60 characters (a long list, a 400-digit number)."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def row_error(row, spec):
    """What is wrong with row (a dict) under spec, as one phrase, or None. A
    row that lacks a required key but has the keys of another tool's rows
    is named as that tool's (a replay row given to a sim reader)."""
    missing = [k for k in spec.required if k not in row]
    if missing:
        for other in (SIM_ROW, REPLAY_ROW, GPU_ROW):
            if other.tool != spec.tool and all(k in row for k in other.signature):
                return f"a {other.tool} row, not a {spec.tool} row"
        return f"missing {', '.join(missing)}: not a {spec.tool} row"
    for fields in (spec.required, spec.optional):
        for key, check in fields.items():
            if key in row:
                need = check(row[key])
                if need:
                    return f"{key} is {shown(row[key])}, {need}"
    return None


# The checks: each returns None for a good value, else what it should be.

def string(v):
    return None if isinstance(v, str) and v else "not a non-empty string"


def boolean(v):
    return None if isinstance(v, bool) else "not true or false"


def number(v):
    """A JSON number a float holds: a bool is an int to Python, 1e400 reads
    as infinity and 10**400 has no float (each failed further on)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return "not a number"
    try:
        return None if math.isfinite(float(v)) else "out of range (no float holds it)"
    except OverflowError:
        return "out of range (no float holds it)"


def ratio(v):
    """A budget ratio: coop sim takes (0, 1]."""
    return number(v) or (None if 0 < v <= 1 else "not a ratio in (0, 1]")


def min_ratio(v):
    """A min_budget_ratio: [0, 1] (0 for a log whose peak is 0 bytes)."""
    return number(v) or (None if 0 <= v <= 1 else "not a ratio in [0, 1]")


def overhead(v):
    """(base + recompute) / base: never below 1 (1 where base is 0), and
    below 2^63: the recompute stops past 2^62 ns plus one op (under 2^61 ns)
    and the base is 1 ns or more. A larger one (1.7e308) made plot_sim.py's
    panel top infinite, a traceback in matplotlib's ticker."""
    if number(v):
        return number(v)
    if v < 1:
        return "below 1 (total / base compute)"
    return None if v < 2**63 else "above 2^63 (coop's largest: (base + recompute) / base)"


def non_negative(v):
    return number(v) or (None if v >= 0 else "negative")


def count(v):
    return None if type(v) is int and v >= 0 else "not a count (a whole number, 0 or more)"


def byte_count(v):
    """Bytes: whole, 0 to 2^64 (coop writes one past 2^63 as a real)."""
    return number(v) or (None if 0 <= v <= 2**64 and float(v).is_integer()
                         else "not a byte count (whole, 0 to 2^64)")


def one_of(*names):
    def check(v):
        return None if isinstance(v, str) and v in names else f"not one of {', '.join(names)}"
    return check


def or_null(check):
    def either(v):
        why = None if v is None else check(v)
        return why and why + ", nor null"
    return either


# coop sim --json (src/cli/cmd_sim.c print_row); "engine": lib rows, and
# compare_sim_lib.py's --jsonl, which names both. A failed run's overhead is
# still its recompute so far, or null.
SIM_ROW = Spec("coop sim --json", ("log", "budget_ratio"), {
    "log": string, "policy": string, "memory": one_of("ideal", "arena"),
    "budget_ratio": ratio, "result": one_of("ok", "oom", "thrash", "error"),
    "overhead": or_null(overhead),
}, {
    "engine": one_of("lib", "sim"), "evictions": count,
    "min_budget_ratio": or_null(min_ratio), "stable_min_ratio": or_null(min_ratio),
})

# coop replay --json (src/replay/report.c): the fields the checkers read.
REPLAY_ROW = Spec("coop replay --json", ("trace", "peak_live_bytes"), {
    "trace": string, "policy": string, "peak_live_bytes": byte_count,
    "peak_reserved_bytes": or_null(byte_count), "min_capacity_bytes": or_null(byte_count),
    "map_bytes": or_null(byte_count), "ns_per_op": or_null(non_negative),
}, {
    "torch_settings_default": or_null(boolean), "recorded_by_coop": boolean,
    "path": or_null(string),
})

# a line of scripts/gpu/'s results, named when given to the readers above
GPU_ROW = Spec("scripts/gpu results", ("script",), {"script": string}, {})


def sim_row_error(row):
    """row_error under SIM_ROW, and an ok row must have its overhead."""
    why = row_error(row, SIM_ROW)
    if not why and row["result"] == "ok" and row["overhead"] is None:
        why = "overhead is null, not a number (in an ok row)"
    return why


def replay_row_error(row):
    return row_error(row, REPLAY_ROW)


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
