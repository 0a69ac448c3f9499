"""Runs a checker script of scripts/ on JSON lines written to a temporary
file: the helper the criteria checkers' tests share. Standard library only."""

import json
import os
import subprocess
import sys
import tempfile


def run_on_rows(test, script, rows, *extra, raw=None):
    """Writes rows (one JSON object a line) or raw text to a temporary .jsonl
    file, removed when test ends, and runs script on it with extra
    arguments; returns (exit status, stdout, stderr, the file's path)."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write(raw if raw is not None else "".join(json.dumps(r) + "\n" for r in rows))
    test.addCleanup(os.unlink, f.name)
    p = subprocess.run([sys.executable, script, f.name, *extra], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr, f.name


def run_on_missing_file(script):
    """Runs script on a path that does not exist; returns (exit status,
    stderr)."""
    p = subprocess.run([sys.executable, script, "/nonexistent.jsonl"], capture_output=True,
                       text=True)
    return p.returncode, p.stderr
