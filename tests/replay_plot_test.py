#!/usr/bin/python3
"""scripts/plot_replay.py draws a small timeline, one where a policy ran out
of memory, and refuses a malformed one."""
import os
import resource
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "plot_replay.py")

TIMELINE = """coop-replay-timeline 1
trace tiny 4
policy torch
s 0 1572864 20971520
s 1 0 20971520
s 2 1000 23068672
s 3 0 23068672
b 7f0000000000 1572864 0 1
b 7f0001400000 1000 2 3
policy ideal
s 0 1572864 1572864
s 1 0 0
s 2 1000 1000
s 3 0 0
b 100000 1572864 0 1
b 280000 1000 2 3
"""

# `coop replay --capacity 3M --timeline`: torch ran out of memory at event 1
# (a second stream's segment); its series stop there and its block was still
# live when the run stopped (END = EVENTS)
OOM_TIMELINE = """coop-replay-timeline 1
trace tiny 4
policy torch
s 0 100 2097152
b 7f0000000000 100 0 4
oom 1
policy ideal
s 0 100 100
s 1 300 300
s 2 200 200
s 3 0 0
b 100000 100 0 2
b 100200 200 1 3
"""


def draw(d, name, text):
    """Writes text to d/name and runs the script on it; returns (result, png path)."""
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    png = path + ".png"
    r = subprocess.run([sys.executable, SCRIPT, path, "-o", png], capture_output=True, text=True)
    return r, png


def figure_checks(plot_replay, d):
    """What plot_trace() draws, read back from its figures (plt.close is
    replaced so they stay open): an address map per placing policy but
    ideal; live bytes from a run that did not stop; reserved bytes held to
    the end; an OOM marked on both panels and the map's blocks cut there;
    --max-blocks keeping the largest; --policy choosing the panels."""
    figures = []
    close = plot_replay.plt.close
    plot_replay.plt.close = figures.append
    png = os.path.join(d, "figure.png")

    def draw(text, wanted=None, max_blocks=20000):
        path = os.path.join(d, "figure.txt")
        with open(path, "w") as f:
            f.write(text)
        ((name, events, policies),) = plot_replay.read_timeline(path)
        plot_replay.plot_trace(name, events, policies, png, wanted, max_blocks)
        return figures[-1].axes, policies

    def labelled(ax):
        return {line.get_label(): line for line in ax.get_lines()}

    try:
        mib = 1024.0 * 1024.0
        axes, _ = draw(TIMELINE)
        assert len(axes) == 2, len(axes)  # the curves, torch's map: ideal places nothing real
        lines = labelled(axes[0])
        assert sorted(lines) == ["live", "torch reserved"], sorted(lines)
        reserved = lines["torch reserved"]
        assert list(reserved.get_xdata()) == [0, 1, 2, 3, 4], reserved.get_xdata()  # held to the end
        assert list(reserved.get_ydata()) == [20, 20, 22, 22, 22], reserved.get_ydata()
        assert list(lines["live"].get_ydata()) == [1.5, 0, 1000 / mib, 0, 0], lines["live"].get_ydata()
        assert axes[1].get_title().startswith("torch: address map (2 blocks)"), axes[1].get_title()

        axes, _ = draw(TIMELINE, max_blocks=1)  # the largest block is kept
        (polys,) = axes[1].collections
        assert axes[1].get_title() == "torch: address map (1 blocks)", axes[1].get_title()
        (poly,) = polys.get_paths()
        assert max(poly.vertices[:, 1]) == 1.5, poly.vertices

        axes, _ = draw(TIMELINE, wanted={"ideal"})
        assert len(axes) == 1 and sorted(labelled(axes[0])) == ["live"], (len(axes), labelled(axes[0]))

        axes, policies = draw(OOM_TIMELINE)
        assert policies["torch"]["oom"] == 1, policies["torch"]
        lines = labelled(axes[0])
        # torch stopped at event 1: the live bytes are ideal's, to the end
        assert list(lines["live"].get_xdata()) == [0, 1, 2, 3, 4], lines["live"].get_xdata()
        assert list(lines["torch OOM at 1"].get_xdata()) == [1, 1], lines["torch OOM at 1"].get_xdata()
        assert list(lines["torch reserved"].get_xdata()) == [0, 1], lines["torch reserved"].get_xdata()
        stops = [line for line in axes[1].get_lines() if line.get_color() == "red"]
        assert [list(line.get_xdata()) for line in stops] == [[1, 1]], stops
        assert axes[1].get_title().endswith(", OOM at event 1"), axes[1].get_title()
        (polys,) = axes[1].collections
        (poly,) = polys.get_paths()
        assert max(poly.vertices[:, 0]) == 1, poly.vertices  # the block ends where the run did
    finally:
        plot_replay.plt.close = close
        for fig in figures:
            close(fig)


def bad_record_checks(plot_replay, d):
    """read_timeline refuses, naming the line, each timeline coop never
    writes that it used to draw: a record with fields too many or too few
    (extra ones ignored; 'policy' alone an IndexError's 'list index out of
    range'), numbers that are not unsigned decimals (int() took -4, +4 and
    1_000), a policy twice in a trace (the second replaced the first), s
    records out of order or past the events, a block ending before it
    starts or past the trace, a second or misplaced oom; a number past
    2^64 - 1 (coop writes 64-bit counts; 400 digits, which no float holds,
    were an OverflowError traceback in the drawing)."""
    head = "coop-replay-timeline 1\ntrace tiny 4\npolicy torch\n"
    big = "9" * 400
    cases = [
        (head + "s 0 10 20 99\n", ":4: 's' record of 4 fields, not 3"),
        ("coop-replay-timeline 1\ntrace tiny 4 5\n", ":2: 'trace' record of 3 fields, not 2"),
        (head + "policy\n", ":4: 'policy' record of 0 fields, not 1"),
        ("coop-replay-timeline 1\ntrace tiny -4\n", ":2: EVENTS '-4' is not a decimal number"),
        (head + "s 0 1_000 20\n", ":4: LIVE '1_000' is not a decimal number"),
        (head + "b 0x10 10 0 1\n", ":4: OFFSET '0x10' is not a hex number"),
        (head + "s 0 1 1\npolicy torch\n", ":5: a second policy torch in trace tiny"),
        (head + "s 2 1 1\ns 1 1 1\n", ":5: s event 1 is not after the previous s (event 2)"),
        (head + "s 4 1 1\n", ":4: s event 4 is past the trace's 4 events"),
        (head + "b 0 10 3 1\n", ":4: b from event 3 to 1: not START <= END"),
        (head + "b 0 10 0 5\n", ":4: b from event 0 to 5"),
        (head + "oom 1\noom 2\n", ":5: a second oom record (the first at event 1)"),
        (head + "s 2 1 1\noom 1\n", ":5: oom at event 1: not after the s records"),
        (head + "s 0 %s 20\n" % big, ":4: LIVE 99999999999999999999... is past 2^64 - 1"),
        ("coop-replay-timeline 1\ntrace tiny %s\n" % big, ":2: EVENTS 9999"),
        (head + "b 0 %s 0 1\n" % big, ":4: SIZE 9999"),
        (head + "b %s 1 0 1\n" % big, ":4: OFFSET 9999"),
        (head + "s 0 18446744073709551616 20\n", ":4: LIVE 18446744073709551616 is past 2^64 - 1"),
        (head + "b 10000000000000000 1 0 1\n", ":4: OFFSET 10000000000000000 is past 2^64 - 1"),
    ]
    path = os.path.join(d, "bad-record.txt")
    for text, says in cases:
        with open(path, "w") as f:
            f.write(text)
        try:
            plot_replay.read_timeline(path)
        except plot_replay.TimelineError as e:
            assert str(e).startswith(path + ":") and says in str(e), (text, str(e))
        else:
            raise AssertionError("accepted: %r" % text)


def output_checks(d):
    """Names coop writes into a timeline and what the script writes."""
    # a name holding U+00A0 (coop keeps it: timeline.h) is one field; it
    # was split there ("trace nb sp 4": 'sp' is no event count)
    r, png = draw(d, "nbsp.txt", TIMELINE.replace("trace tiny", "trace nb\u00a0sp.trace"))
    assert r.returncode == 0 and os.path.exists(png), r.stderr
    # two traces of one name (two folders' x.trace) drew the second over
    # the first: the second is OUT-x.trace-2.png
    two = TIMELINE.replace("trace tiny", "trace x.trace")
    r, png = draw(d, "two.txt", two + two[len("coop-replay-timeline 1\n"):])
    stem = os.path.join(d, "two.txt")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [stem + "-x.trace.png", stem + "-x.trace-2.png"], r.stdout
    assert all(os.path.exists(p) for p in r.stdout.split()), r.stdout
    # a save that fails midway (files limited to 4 KiB, a full disk for one
    # process) keeps the previous image and leaves no temporary file
    out_dir = os.path.join(d, "out")
    os.mkdir(out_dir)
    png = os.path.join(out_dir, "t.png")
    with open(png, "wb") as f:
        f.write(b"the previous image")
    timeline = os.path.join(d, "nbsp.txt")

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    r = subprocess.run([sys.executable, SCRIPT, timeline, "-o", png], capture_output=True, text=True,
                       preexec_fn=limit)
    assert r.returncode == 2 and "t.png: File too large" in r.stderr, (r.returncode, r.stderr)
    with open(png, "rb") as f:
        assert f.read() == b"the previous image", "a failed save replaced the image"
    assert os.listdir(out_dir) == ["t.png"], os.listdir(out_dir)
    r = subprocess.run([sys.executable, SCRIPT, timeline, "-o", os.path.join(out_dir, "t.xyz")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "t.xyz: Format 'xyz' is not supported" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and os.listdir(out_dir) == ["t.png"], r.stderr
    # -o the timeline itself (or a link to it): the image replaced the
    # timeline (one with an extension matplotlib lacks was safe); refused before drawing (in-process: no second matplotlib)
    import contextlib
    import io
    import plot_replay
    with open(timeline, "rb") as f:
        before = f.read()
    timeline = os.path.join(d, "timeline")  # no extension: drawn as PNG
    with open(timeline, "wb") as f:
        f.write(before)
    link = os.path.join(d, "link.txt")
    os.symlink(timeline, link)
    for out in (timeline, link):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            status = plot_replay.main([timeline, "-o", out])
        assert status == 2 and err.getvalue() == (
            "plot_replay: -o %s: is the timeline %s: the image would replace it\n"
            % (out, timeline)), (status, err.getvalue())
        with open(timeline, "rb") as f:
            assert f.read() == before, "the timeline was overwritten"


def missing_matplotlib_checks():
    """Under a python3 without matplotlib (another interpreter on PATH), both
    plot scripts say what is missing in one line, exit 1; they ended in an
    ImportError traceback. A matplotlib that fails to import stands in for
    the missing one, so this runs whether or not it is installed."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "matplotlib.py"), "w") as f:
            f.write("raise ImportError(\"No module named 'matplotlib'\")\n")
        env = dict(os.environ, PYTHONPATH=d)
        for script in ("plot_replay.py", "plot_sim.py"):
            path = os.path.join(HERE, "..", "scripts", script)
            r = subprocess.run([sys.executable, path, "x", "y.png"], capture_output=True,
                               text=True, env=env)
            assert r.returncode == 1, (script, r.returncode, r.stderr)
            assert "Traceback" not in r.stderr, r.stderr
            assert ("%s: needs matplotlib (Debian: python3-matplotlib" % script) in r.stderr, r.stderr


def main():
    missing_matplotlib_checks()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("SKIP: matplotlib is not installed")
        return 77
    with tempfile.TemporaryDirectory() as d:
        good = os.path.join(d, "t.txt")
        with open(good, "w") as f:
            f.write(TIMELINE)
        png = os.path.join(d, "t.png")
        r = subprocess.run([sys.executable, SCRIPT, good, "-o", png], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        with open(png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", "not a PNG"
        bad = os.path.join(d, "bad.txt")
        with open(bad, "w") as f:
            f.write(TIMELINE.replace("s 2 1000", "s two 1000"))
        r = subprocess.run([sys.executable, SCRIPT, bad, "-o", png], capture_output=True, text=True)
        assert r.returncode == 2, r.returncode
        assert "bad.txt:6:" in r.stderr, r.stderr
        r, png = draw(d, "oom.txt", OOM_TIMELINE)
        assert r.returncode == 0, r.stderr
        with open(png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", "not a PNG"
        # an oom record belongs to a policy
        r, _ = draw(d, "stray.txt", "coop-replay-timeline 1\ntrace tiny 4\noom 1\n")
        assert r.returncode == 2, r.returncode
        assert "stray.txt:3:" in r.stderr, r.stderr
        # each used to end in a traceback, or (--policy) an empty figure
        good = os.path.join(d, "t.txt")
        for args, says in (([good, "--policy", "torhc,torch", "-o", png], "--policy: torhc not in"),
                           ([good, "--max-blocks", "-5"], "--max-blocks: -5"),
                           ([good, "-o", os.path.join(d, "none", "x.png")], "none/x.png: No such file"),
                           ([good, "--policy", "torch,"], "--policy torch,: an empty name"),
                           ([os.path.join(d, "absent.txt")], "absent.txt: No such file or directory")):
            r = subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True)
            assert r.returncode == 2 and says in r.stderr, (args, r.returncode, r.stderr)
            assert "Traceback" not in r.stderr, r.stderr
        latin1 = os.path.join(d, "latin1.txt")
        with open(latin1, "wb") as f:
            f.write(TIMELINE.replace("trace tiny", "trace t\xe9").encode("latin-1"))
        r = subprocess.run([sys.executable, SCRIPT, latin1, "-o", png], capture_output=True, text=True)
        assert r.returncode == 2 and "latin1.txt: not UTF-8 text" in r.stderr, r.stderr
    # torch-expandable's pools sit ~90 GiB apart: the map cuts the unused stretch
    sys.path.insert(0, os.path.dirname(SCRIPT))
    import plot_replay

    mib, base = 1 << 20, 0x7F0000000000
    blocks = [(base, 4 * mib, 0, 1), (base + 2 * mib, 4 * mib, 1, 2),  # overlap: one range
              (base + (100 << 30), mib, 0, 2), (base + (100 << 30) + 2 * mib, mib, 0, 1)]
    offset, cuts = plot_replay.cut_gaps(blocks)
    # covered: 6 MiB, then 1 MiB, a 1 MiB hole (kept: not above keep), 1 MiB
    assert offset(base) == 0 and offset(base + 2 * mib) == 2 * mib
    assert offset(base + (100 << 30)) == 7 * mib, offset(base + (100 << 30))
    assert offset(base + (100 << 30) + 2 * mib) == 9 * mib
    assert cuts == [6 * mib + mib // 2], cuts
    offset, cuts = plot_replay.cut_gaps(blocks[:2])
    assert cuts == [] and offset(base + 5 * mib) == 5 * mib
    with tempfile.TemporaryDirectory() as d:
        bad_record_checks(plot_replay, d)
        figure_checks(plot_replay, d)
        # an 's' after a new trace line belongs to no policy of that trace
        r, _ = draw(d, "orphan.txt", "coop-replay-timeline 1\ntrace a 2\npolicy p\ns 0 1 1\n"
                    "trace b 2\ns 0 1 1\n")
        assert r.returncode == 2 and "orphan.txt:6: 's' record before any policy" in r.stderr, r.stderr
        r, _ = draw(d, "empty.txt", "coop-replay-timeline 1\n")
        assert r.returncode == 2 and "empty.txt: no traces" in r.stderr, r.stderr
        r = subprocess.run([sys.executable, SCRIPT, os.path.join(d, "empty.txt"), "--max-blocks", "0"],
                           capture_output=True, text=True)
        assert r.returncode == 2 and "--max-blocks: 0 is not a positive count" in r.stderr, r.stderr
        output_checks(d)
    print("plot_replay: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
