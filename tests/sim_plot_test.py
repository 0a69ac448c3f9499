#!/usr/bin/python3
"""scripts/plot_sim.py draws overhead vs budget from coop sim --json lines and
refuses a malformed file, naming the line."""
import contextlib
import io
import json
import os
import resource
import signal
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "plot_sim.py")

ROW = ('{"log":"tiny.log","policy":"%s","memory":"arena","budget_ratio":%s,"result":"%s",'
       '"overhead":%s,"evictions":3,"remat_ops":3,"search_ns_p50":1,"search_ns_p99":2,'
       '"heuristic_evals":4,"frag_at_evict":0.1,"frag_failures":0,"min_budget_ratio":0.4}\n')


def sim_row(log, memory, policy, ratio, result, overhead):
    return json.dumps({"log": log, "policy": policy, "memory": memory, "budget_ratio": ratio, "result": result,
                       "overhead": overhead}) + "\n"


def check_figure(d):
    """What plot() draws, read back from the figure: panels by (log, memory
    model) in rows of three, named by short(); a line per policy through its
    ok rows in ratio order (coop solid with dots, the others dashed); crosses
    for the failed rows above every ok point; the budget axis reversed; the
    title. Returns a list of failures."""
    sys.path.insert(0, os.path.dirname(SCRIPT))
    import plot_sim

    rows_file = os.path.join(d, "figure.jsonl")
    with open(rows_file, "w") as f:
        for row in (("a-1-2.log.gz", "arena", "coop", 0.9, "ok", 1.01),
                    ("a-1-2.log.gz", "arena", "coop", 0.3, "oom", None),  # no overhead: nothing ran
                    ("a-1-2.log.gz", "arena", "coop", 0.5, "ok", 1.2),
                    ("a-1-2.log.gz", "arena", "coop", 0.4, "thrash", 2.5),
                    ("a-1-2.log.gz", "arena", "dtr", 0.9, "ok", 1.02),
                    ("a-1-2.log.gz", "ideal", "coop", 0.9, "ok", 1.5),
                    ("densenet.log", "arena", "coop", 0.9, "ok", 1.0),
                    ("lstm-train-step.ops.jsonl.gz", "arena", "coop", 0.9, "ok", 1.0)):
            f.write(sim_row(*row))
    figures = []
    subplots = plot_sim.plt.subplots

    def keep(*args, **kwargs):
        figures.append(subplots(*args, **kwargs))
        return figures[-1]

    plot_sim.plt.subplots = keep
    try:
        plot_sim.plot(plot_sim.load(rows_file), os.path.join(d, "figure.png"), "the title")
    finally:
        plot_sim.plt.subplots = subplots
    fig, axes = figures[0]
    fails = []

    def want(what, got, expected):
        if got != expected:
            fails.append("%s: %r, expected %r" % (what, got, expected))

    want("panel grid", axes.shape, (2, 3))
    want("titles", [ax.get_title() for ax in axes.flat[:4]],
         ["a (arena)", "a (ideal)", "densenet (arena)", "lstm-train-step (arena)"])
    want("unused panels shown", [ax.axison for ax in axes.flat[4:]], [False, False])
    # get_suptitle() came in matplotlib 3.8; Debian 12's 3.6 keeps it in _suptitle.
    if hasattr(fig, "get_suptitle"):
        suptitle = fig.get_suptitle() or None
    else:
        suptitle = fig._suptitle.get_text() if fig._suptitle else None
    want("suptitle", suptitle, "the title")
    ax = axes.flat[0]
    want("budget axis reversed", ax.xaxis_inverted(), True)
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    want("policies", sorted(lines), ["coop", "dtr"])
    coop = lines["coop"]
    want("coop's points", (list(coop.get_xdata()), list(coop.get_ydata())), ([0.5, 0.9], [1.2, 1.01]))
    want("coop's style", (coop.get_linestyle(), coop.get_marker()), ("-", "o"))
    want("dtr's style", (lines["dtr"].get_linestyle(), lines["dtr"].get_marker()), ("--", "."))
    crosses = [line for line in ax.get_lines() if line.get_marker() == "x"]
    want("failed rows", [(list(c.get_xdata()), [round(y, 6) for y in c.get_ydata()]) for c in crosses],
         [([0.3, 0.4], [round(1.2 * 1.02, 6)] * 2)])
    plot_sim.plt.close(fig)
    return fails


def bad_row_checks(d):
    """plot_sim.load refuses, in one line with exit 2, each row it used to
    draw wrong or die on, a class of defect each: fields of the wrong JSON
    type (a traceback in short() or in a set), results and memory models
    coop never writes (a result of 3 drawn as a failure cross), values out
    of range, numbers no float holds, a second row of one point (a zigzag),
    rows of another tool or of both engines. In-process: one matplotlib
    import for them all. Returns a list of failures."""
    sys.path.insert(0, os.path.dirname(SCRIPT))
    import plot_sim

    good = sim_row("a.log.gz", "arena", "coop", 0.9, "ok", 1.1)
    cases = [
        ("log a number", sim_row(5, "arena", "coop", 0.9, "ok", 1.1), ":1: log is 5, not a"),
        ("policy an object", sim_row("a", "arena", {"p": 1}, 0.9, "ok", 1.1),
         ':1: policy is {"p": 1}, not a non-empty string'),
        ("memory a list", sim_row("a", ["arena"], "coop", 0.9, "ok", 1.1), ":1: memory is"),
        ("result 3", sim_row("a", "arena", "coop", 0.9, 3, 1.1),
         ":1: result is 3, not one of ok, oom, thrash, error"),
        ("result banana", sim_row("a", "arena", "coop", 0.9, "banana", 1.1), ':1: result is "banana"'),
        ("memory unknown", sim_row("a", "Arena", "coop", 0.9, "ok", 1.1), ':1: memory is "Arena"'),
        ("ratio above 1", sim_row("a", "arena", "coop", 1.5, "ok", 1.1),
         ":1: budget_ratio is 1.5, not a ratio in (0, 1]"),
        ("ratio negative", sim_row("a", "arena", "coop", -0.5, "ok", 1.1), ":1: budget_ratio is -0.5"),
        ("overhead below 1", sim_row("a", "arena", "coop", 0.9, "ok", 0.5), ":1: overhead is 0.5, below 1"),
        ("overhead 1e400", sim_row("a", "arena", "coop", 0.9, "ok", "BIG").replace('"BIG"', "1e400"),
         ":1: overhead is Infinity, out of range"),
        # a float's top (1.7e308 x 1.02) is infinite: matplotlib's ticker raised IndexError
        ("overhead 1.7e308", sim_row("a", "arena", "coop", 0.9, "ok", 1.7e308),
         ":1: overhead is 1.7e+308, above 2^63 (coop's largest: (base + recompute) / base)"),
        ("overhead 1e19", sim_row("a", "arena", "coop", 0.9, "ok", 1e19),
         ":1: overhead is 1e+19, above 2^63"),
        ("ratio 400 digits", sim_row("a", "arena", "coop", "BIG", "ok", 1.1).replace('"BIG"', "9" * 400),
         ":1: budget_ratio is 999"),
        ("a second row", good + good, ":2: a second row for a.log.gz arena coop at 0.9 (the first: line 1)"),
        ("a replay row", good + '{"trace": "t.trace", "policy": "coop", "peak_live_bytes": 1}\n',
         ":2: a coop replay --json row, not a coop sim --json row"),
        ("both engines", good.replace("{", '{"engine": "lib", ', 1) + good,
         ":2: rows of both engines (a sim row, lib at line 1)"),
        ("blank lines", "\n  \n\n", ": no results"),
    ]
    fails = []
    for name, text, says in cases:
        path = os.path.join(d, "bad-row.jsonl")
        with open(path, "w") as f:
            f.write(text)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                plot_sim.load(path)
            code = 0
        except SystemExit as e:
            code = e.code
        except Exception as e:  # noqa: BLE001 (a traceback, as the script would show)
            code, err = "an exception", io.StringIO(repr(e))
        if code != 2 or says not in err.getvalue() or len(err.getvalue().splitlines()) != 1:
            fails.append("%s: %s, %r" % (name, code, err.getvalue()))
    return fails


def limited_to(size):
    """A preexec_fn: files of at most size bytes, a write past it failing
    with EFBIG (SIGXFSZ ignored): a full disk, for one process."""
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    return limit


def output_checks(good, d):
    """The image appears whole or not at all (scripts/atomic_file.py): a
    save that fails midway keeps the previous image and leaves no other
    file; a format matplotlib lacks is one line, exit 2; a device is
    written, not replaced. Returns a list of failures."""
    fails = []
    out_dir = os.path.join(d, "out")
    os.mkdir(out_dir)
    png = os.path.join(out_dir, "plot.png")
    with open(png, "wb") as f:
        f.write(b"the previous image")
    r = subprocess.run([sys.executable, SCRIPT, good, png], capture_output=True, text=True,
                       preexec_fn=limited_to(4096))
    with open(png, "rb") as f:
        kept = f.read()
    if r.returncode != 2 or "plot.png: File too large" not in r.stderr or "Traceback" in r.stderr:
        fails.append("a save past the file size limit: exit %d, %r" % (r.returncode, r.stderr))
    if kept != b"the previous image" or os.listdir(out_dir) != ["plot.png"]:
        fails.append("a failed save left %r, files %s" % (kept[:20], os.listdir(out_dir)))
    r = subprocess.run([sys.executable, SCRIPT, good, os.path.join(out_dir, "plot.xyz")],
                       capture_output=True, text=True)
    if r.returncode != 2 or "plot.xyz: Format 'xyz' is not supported" not in r.stderr or "Traceback" in r.stderr:
        fails.append("an unknown format: exit %d, %r" % (r.returncode, r.stderr))
    if os.listdir(out_dir) != ["plot.png"]:
        fails.append("an unknown format left %s" % os.listdir(out_dir))
    r = subprocess.run([sys.executable, SCRIPT, good, os.devnull], capture_output=True, text=True)
    if r.returncode != 0 or not stat.S_ISCHR(os.stat(os.devnull).st_mode):
        fails.append("%s as the output: exit %d, %r" % (os.devnull, r.returncode, r.stderr))
    # OUT the results file itself (or a link to it), named without an
    # extension (drawn as PNG): the image replaced the rows. In-process.
    sys.path.insert(0, os.path.dirname(SCRIPT))
    import plot_sim
    rows = os.path.join(d, "rows")
    with open(good, "rb") as f, open(rows, "wb") as g:
        g.write(f.read())
    link = os.path.join(d, "rows-link")
    os.symlink(rows, link)
    for out in (rows, link):
        err = io.StringIO()
        argv, sys.argv = sys.argv, ["plot_sim.py", rows, out]
        try:
            with contextlib.redirect_stderr(err):
                plot_sim.main()
            status = 0
        except SystemExit as e:
            status = e.code
        finally:
            sys.argv = argv
        with open(rows, "rb") as f, open(good, "rb") as g:
            kept = f.read() == g.read()
        says = "plot_sim: %s: is the results file %s: the image would replace it\n" % (out, rows)
        if status != 2 or err.getvalue() != says or not kept:
            fails.append("OUT the results (%s): exit %s, %r, rows kept: %s"
                         % (out, status, err.getvalue(), kept))
            with open(good, "rb") as f, open(rows, "wb") as g:
                g.write(f.read())
    return fails


def main():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("SKIP: matplotlib is not installed")
        return 77
    with tempfile.TemporaryDirectory() as d:
        good = os.path.join(d, "sim.jsonl")
        with open(good, "w") as f:
            for pol, ratio, res, ovh in [("coop", 0.9, "ok", 1.01), ("coop", 0.5, "ok", 1.2),
                                         ("dtr", 0.9, "ok", 1.02), ("dtr", 0.5, "thrash", 2.0)]:
                f.write(ROW % (pol, ratio, res, ovh))
        png = os.path.join(d, "out.png")
        r = subprocess.run([sys.executable, SCRIPT, good, png], capture_output=True, text=True)
        if r.returncode != 0:
            print("FAIL: plot_sim.py failed:", r.stderr)
            return 1
        with open(png, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                print("FAIL: output is not a PNG")
                return 1
        bad = os.path.join(d, "bad.jsonl")
        with open(bad, "w") as f:
            f.write(ROW % ("coop", 0.9, "ok", 1.01))
            f.write('{"log": "x"}\n')
        r = subprocess.run([sys.executable, SCRIPT, bad, png], capture_output=True, text=True)
        if r.returncode != 2 or "bad.jsonl:2: missing" not in r.stderr:
            print("FAIL: malformed input accepted or unnamed:", r.returncode, r.stderr)
            return 1
        for line, reason in (("{oops", "bad.jsonl:2: not a coop sim --json row"),
                             ("1", "bad.jsonl:2: not a coop sim --json row (a JSON int")):
            with open(bad, "w") as f:
                f.write(ROW % ("coop", 0.9, "ok", 1.01) + line + "\n")
            r = subprocess.run([sys.executable, SCRIPT, bad, png], capture_output=True, text=True)
            if r.returncode != 2 or reason not in r.stderr or "Traceback" in r.stderr:
                print("FAIL: line %r accepted or not named:" % line, r.returncode, r.stderr)
                return 1
            if "a table?" in r.stderr:  # JSON gone wrong, not words
                print("FAIL: line %r taken for a table:" % line, r.stderr)
                return 1
        # coop sim's table, not its --json rows: the message says which flag
        with open(bad, "w") as f:
            f.write("log  policy  memory ratio result overhead\n")
        r = subprocess.run([sys.executable, SCRIPT, bad, png], capture_output=True, text=True)
        if r.returncode != 2 or "bad.jsonl:1: not a coop sim --json row (a table? run coop " \
                "sim with --json; " not in r.stderr:
            print("FAIL: a table without the --json hint:", r.returncode, r.stderr)
            return 1
        # each used to end in a traceback
        with open(bad, "w") as f:
            f.write(ROW % ("coop", 0.9, "ok", "null"))
        r = subprocess.run([sys.executable, SCRIPT, bad, png], capture_output=True, text=True)
        if r.returncode != 2 or "bad.jsonl:1: overhead is null, not a number" not in r.stderr:
            print("FAIL: an ok row without an overhead accepted:", r.returncode, r.stderr)
            return 1
        r = subprocess.run([sys.executable, SCRIPT, good, os.path.join(d, "none", "out.png")],
                           capture_output=True, text=True)
        if r.returncode != 2 or "none/out.png: No such file" not in r.stderr or "Traceback" in r.stderr:
            print("FAIL: an unwritable output is not one line with exit 2:", r.returncode, r.stderr)
            return 1
        r = subprocess.run([sys.executable, SCRIPT, os.path.join(d, "absent.jsonl"), png],
                           capture_output=True, text=True)
        if r.returncode != 2 or "absent.jsonl: No such file" not in r.stderr or "Traceback" in r.stderr:
            print("FAIL: a missing file is not one line with exit 2:", r.returncode, r.stderr)
            return 1
        for name, text, says in (("empty.jsonl", "", "empty.jsonl: no results"),
                                 ("bool.jsonl", sim_row("x", "arena", "coop", True, "ok", 1.0),
                                  "bool.jsonl:1: budget_ratio is true, not a number")):
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.write(text)
            r = subprocess.run([sys.executable, SCRIPT, path, png], capture_output=True, text=True)
            if r.returncode != 2 or says not in r.stderr or "Traceback" in r.stderr:
                print("FAIL: %s accepted or not named:" % name, r.returncode, r.stderr)
                return 1
        fails = output_checks(good, d)
        if fails:
            print("FAIL: output files:\n  " + "\n  ".join(fails))
            return 1
        # a bad row keeps the old image (it used to be drawn over, a cross)
        bad = os.path.join(d, "banana.jsonl")
        with open(bad, "w") as f:
            f.write(sim_row("a.log.gz", "arena", "coop", 0.9, "banana", 1.1))
        with open(png, "rb") as f:
            before = f.read()
        r = subprocess.run([sys.executable, SCRIPT, bad, png], capture_output=True, text=True)
        with open(png, "rb") as f:
            kept = f.read() == before
        if r.returncode != 2 or 'banana.jsonl:1: result is "banana"' not in r.stderr or not kept:
            print("FAIL: a result of banana drawn:", r.returncode, r.stderr, "image kept:", kept)
            return 1
        fails = bad_row_checks(d)
        if fails:
            print("FAIL: bad rows not refused in one line:\n  " + "\n  ".join(fails))
            return 1
        fails = check_figure(d)
        if fails:
            print("FAIL: the figure is not what the rows say:\n  " + "\n  ".join(fails))
            return 1
    print("PASS: plot_sim.py draws and validates")
    return 0


if __name__ == "__main__":
    sys.exit(main())
