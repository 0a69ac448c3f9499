"""Reading JSON lines (coop replay --json, coop sim --json), shared by the
scripts that check and plot them. Standard library only."""

import json
import sys


def die(prog, message):
    """Ends the program with status 2 and 'PROG: MESSAGE' on stderr."""
    print(f"{prog}: {message}", file=sys.stderr)
    sys.exit(2)


def json_rows(path, prog, what):
    """Yields (line number, object) for each non-blank line of the file path
    ('-': standard input). A file that cannot be read ends the program with
    'PROG: PATH: reason', a line that is not a JSON object with 'PROG:
    PATH:N: WHAT (reason)'."""
    try:
        f = sys.stdin if path == "-" else open(path, encoding="utf-8")
    except OSError as e:
        die(prog, f"{path}: {e.strerror}")
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                die(prog, f"{path}:{n}: {what} ({e})")
            if not isinstance(row, dict):
                die(prog, f"{path}:{n}: {what} (a JSON {type(row).__name__}, not an object)")
            yield n, row
