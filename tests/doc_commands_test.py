#!/usr/bin/python3
"""The commands the documentation shows still work as written.

Reads README.md, docs/*.md, tests/README.md, scripts/gpu/README.md (code
blocks, with backslash continuations joined and the block's own VAR=value
lines expanded, and `inline` spans, joined across a paragraph's lines) and
the usage comments at the top of tests/*.c, tests/*.sh, scripts/*.py and
scripts/*.sh, then checks:

- `coop SUB ...`: SUB is a command of `coop --help`; every long option is one
  that `coop SUB --help` lists; a command without placeholders (LIST, $VAR,
  a|b, ...) is run with its options as written and each path replaced by one
  that does not exist, and must get as far as opening that path (so the
  parser took every option and value, policy names and option pairs
  included); coop bench, which reads no file, is run with --help appended
  (its values are checked as they are read); every path or glob it names
  exists (those under ../shared only where ../shared/workloads does);
- `scripts/X` and `tests/X`: the file exists, or for tests/X a program the
  Makefile builds; `scripts/X.py --flag` in one command: the script defines
  "--flag".

tests/README.md, "Commands in the documentation", lists what was stale. A
self-check first runs the same checks on a small document with a stale
option, an unknown policy, an unknown command and a missing script, and
fails unless each is reported. Standard library only; needs the built
./coop (run from the build directory, as make check does).
"""
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

SRCDIR = os.path.abspath(os.environ.get("srcdir", os.path.join(os.path.dirname(__file__), "..")))
COOP = os.path.abspath(os.environ.get("COOP", "./coop"))
MISSING = "/nonexistent/doc-commands-test"

# `coop WORD` where WORD follows as a command would: any word, so that an
# unknown command is caught; prose ("coop's", "coop command") has no option
COOP_CMD = re.compile(r"(?<![\w/.-])(?:\./)?coop ([a-z][a-z-]*)(?=\s|$)")
PATH_REF = re.compile(r"(?<![\w./-])(?:\./)?((?:scripts|tests)/[A-Za-z0-9_./*-]+)")


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def md_fragments(path):
    """(line, text) of a Markdown file's code-block lines (continuations
    joined, the block's VAR=value assignments expanded) and inline spans."""
    out = []
    lines = read_text(path).split("\n")
    in_code, pending, start, env, para = False, None, 0, {}, []

    def spans(lineno, text):
        for m in re.finditer(r"`([^`]+)`", text):
            out.append((lineno, m.group(1)))

    def end_para():
        if para:
            spans(para[0][0], " ".join(t for _, t in para))
            para.clear()

    for i, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            end_para()
            in_code, env = not in_code, {}
            continue
        if in_code:
            if pending is None:
                pending, start = "", i
            if line.rstrip().endswith("\\"):
                pending += line.rstrip().rstrip("\\") + " "
                continue
            text, pending = re.sub(r"(^|\s)#.*", "", pending + line), None
            m = re.match(r"\s*([A-Za-z_]\w*)=(\"[^\"]*\"|\S*)\s*(#.*)?$", text)
            if m:
                env[m.group(1)] = m.group(2).strip('"')
            for name, value in env.items():
                text = re.sub(r"\$(?:%s\b|\{%s\})" % (name, name), lambda _: value, text)
            out.append((start, text))
        elif not line.strip() or line.lstrip().startswith(("|", "#")):
            end_para()
            spans(i, line)
        else:
            para.append((i, line))
    end_para()
    return out


def header_fragments(path):
    """(line, text) of the usage comment at the top of a program or script
    (a C file's first comment, a Python module's docstring, a shell script's
    leading # lines): its command lines (indented, or after "usage:"),
    continuations joined, and the `inline` spans of its prose."""
    text = read_text(path)
    if path.endswith(".c"):
        m = re.match(r"\s*/\*(.*?)\*/", text, re.S)
        lines = [re.sub(r"^\s*\* ?", "", l) for l in (m.group(1) if m else "").split("\n")]
    elif path.endswith(".py"):
        m = re.match(r'(?:#[^\n]*\n)*\s*"""(.*?)"""', text, re.S)
        lines = m.group(1).split("\n") if m else []
    else:
        lines = []
        for l in text.split("\n")[1:]:
            if not l.startswith("#"):
                break
            lines.append(l[1:].removeprefix(" "))
    out, pending, start, para = [], None, 0, []

    def end_para():
        for m in re.finditer(r"`([^`]+)`", " ".join(t for _, t in para)):
            out.append((para[0][0], m.group(1)))
        para.clear()

    for i, line in enumerate(lines, 1):
        if pending is None and not re.match(r"(\s{2,}|\s*usage:\s)", line, re.I):
            if line.strip():
                para.append((i, line))
            else:
                end_para()
            continue
        end_para()
        if pending is None:
            pending, start = "", i
        line = re.sub(r"^\s*usage:\s", "", line, flags=re.I)
        if line.rstrip().endswith("\\"):
            pending += line.rstrip().rstrip("\\") + " "
            continue
        out.append((start, pending + line))
        pending = None
    end_para()
    return out


class Coop:
    """What the built coop says of itself: commands, options, arities."""

    def __init__(self, exe):
        self.exe = exe
        top = subprocess.run([exe, "--help"], capture_output=True, text=True).stdout
        self.commands = re.findall(r"^  ([a-z]+) ", top.split("commands:")[-1], re.M)
        self.options, self.takes_value = {}, {}
        for sub in self.commands:
            h = subprocess.run([exe, sub, "--help"], capture_output=True, text=True).stdout
            self.options[sub] = set(re.findall(r"--[a-z][a-z0-9-]*", h)) | {"--help"}
            # the synopsis: [--opt VALUE] takes one, [--opt] and [--opt[=X]] do not
            self.takes_value[sub] = {m.group(1) for m in re.finditer(r"\[(--[a-z][a-z0-9-]*) [^\s\]\[]", h)}


def placeholder(tok):
    return (tok.startswith(("$", "[")) or "|" in tok or "..." in tok or tok.endswith("]") or
            re.fullmatch(r"[A-Z][A-Z0-9_.]*", tok) is not None)


def coop_command_text(text, start):
    """The command from start up to a shell separator, a comment or the end."""
    rest = text[start:]
    return re.split(r"\s(?:\||\|\||;|&&|#|>|2>|<)(?:\s|$)|;\s", rest + " ")[0].strip()


class Checker:
    def __init__(self, srcdir, coop):
        self.srcdir, self.coop, self.problems, self.counts, self.ran = srcdir, coop, [], {}, 0
        self.shared = os.path.isdir(os.path.join(srcdir, "..", "shared", "workloads"))
        mk = glob.glob(os.path.join(srcdir, "Makefile.am")) + glob.glob(os.path.join(srcdir, "*", "*.mk")) + \
            glob.glob(os.path.join(srcdir, "*", "*", "*.mk"))
        self.makefiles = "".join(read_text(p) for p in mk)
        ac = os.path.join(srcdir, "configure.ac")
        self.configure_ac = read_text(ac) if os.path.exists(ac) else ""

    def fail(self, where, what):
        self.problems.append("%s: %s" % (where, what))

    def check_coop(self, where, cmd):
        try:
            words = shlex.split(cmd)
        except ValueError:
            words = cmd.split()
        sub, args = words[1], words[2:]
        if sub not in self.coop.commands:
            if any(a.startswith("-") for a in args):
                self.fail(where, "'%s': coop has no command '%s' (%s)" % (cmd, sub, ", ".join(self.coop.commands)))
            return False
        concrete, run_args, prev_takes = True, [], False
        for a in args:
            opt = re.match(r"\[?(--[a-z][a-z0-9-]*)", a)
            if opt and not prev_takes:
                if opt.group(1) not in self.coop.options[sub]:
                    self.fail(where, "'%s': coop %s --help lists no %s" % (cmd, sub, opt.group(1)))
                    concrete = False
                prev_takes = a == opt.group(1) and opt.group(1) in self.coop.takes_value[sub]
                if placeholder(a):
                    concrete = False
                run_args.append(a)
                continue
            if placeholder(a):
                concrete = False
            elif prev_takes:
                run_args.append(a)
            elif a not in ("-h",):
                self.check_path(where, cmd, a)
            else:
                run_args.append(a)
            prev_takes = False
        if prev_takes:
            concrete = False  # `coop replay --capacity`: the option named, not a command
        if concrete:
            self.run_coop(where, cmd, sub, run_args)
        return True

    def check_path(self, where, cmd, arg):
        if "/" not in arg and not re.search(r"\.(gz|pickle|csv|jsonl|trace)$", arg):
            return
        if arg.startswith("../shared/") and not self.shared:
            return
        if not glob.glob(os.path.join(self.srcdir, arg)) and not os.path.isabs(arg):
            # a file the reader makes first (run.pickle, a --timeline's output)
            if "/" in arg or "*" in arg:
                self.fail(where, "'%s': %s matches no file" % (cmd, arg))

    def run_coop(self, where, cmd, sub, args):
        if "--help" in args or "-h" in args:
            argv, want = [self.coop.exe, sub] + args, "status 0"
        elif sub == "bench":
            argv, want = [self.coop.exe, sub] + args + ["--help"], "status 0"
        else:
            paths = [MISSING, MISSING + ".out"] if sub == "convert" else [MISSING]
            argv, want = [self.coop.exe, sub] + args + paths, "to open " + MISSING
        self.ran += 1
        r = subprocess.run(argv, capture_output=True, text=True, cwd=self.srcdir, timeout=60)
        ok = r.returncode == 0 if want == "status 0" else \
            r.returncode == 2 and (MISSING + ": cannot open") in r.stderr
        if not ok:
            self.fail(where, "'%s': expected %s from %s, got status %d: %s" %
                      (cmd, want, " ".join(argv[1:]), r.returncode, r.stderr.strip()[:300]))

    def configure_flag_known(self, flag):
        """--enable-X, --disable-X, --with-X, --without-X: configure.ac
        declares X (autoconf's own options, --prefix and the like, pass)."""
        m = re.match(r"--(enable|disable|with|without)-([a-z0-9-]+)", flag)
        if not m:
            return True
        kind = "ENABLE" if m.group(1) in ("enable", "disable") else "WITH"
        return re.search(r"AC_ARG_%s\(\[%s\]" % (kind, re.escape(m.group(2))), self.configure_ac) is not None

    def flags_after(self, where, text, end, name, known):
        after = re.split(r"\s(?:\||;|&&|#|>)\s", text[end:])[0]
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", after):
            if not known(flag):
                self.fail(where, "%s does not define %s ('%s')" % (name, flag, text.strip()[:120]))

    def check_refs(self, where, text):
        for m in re.finditer(r"(?<![\w./-])\./configure\b", text):
            self.flags_after(where, text, m.end(), "configure.ac", self.configure_flag_known)
        for m in PATH_REF.finditer(text):
            ref = m.group(1).rstrip(".").rstrip("/")
            if "NAME" in ref:
                continue
            refs = [ref]
            brace = re.match(r"\{([^}]*)\}([\w./*-]*)", text[m.end():])
            if brace:  # tests/host_alloc_{readers,sim}_test.c
                refs = [ref + b + brace.group(2) for b in brace.group(1).split(",")]
            for r in refs:
                self.check_ref(where, text, m.end(), r)

    def check_ref(self, where, text, end, ref):
        full = os.path.join(self.srcdir, ref)
        exists = bool(glob.glob(full)) or os.path.exists(full + ".c") or \
            re.search(r"(?<![\w/])%s(?![\w/.])" % re.escape(ref), self.makefiles) is not None
        libs = re.fullmatch(r"(.*)/\.libs/(\w+)\.so", ref)
        if not exists and libs:  # tests/.libs/libmockcuda.so: libtool's tests/libmockcuda.la
            exists = "%s/%s.la" % libs.groups() in self.makefiles
        module = re.fullmatch(r"(.*)\.(\w+)", full)
        if not exists and module and os.path.isfile(module.group(1) + ".py"):
            # scripts/gpu/common.emit: a function of a module
            exists = re.search(r"^def %s\(" % module.group(2), read_text(module.group(1) + ".py"), re.M)
        if not exists:
            self.fail(where, "%s: no such file, nor a program the Makefile builds" % ref)
            return
        if not ref.startswith("scripts/") or not os.path.isfile(full):
            return
        source = read_text(full)
        if full.endswith(".sh") and '"$@"' in source and "configure" in source:
            # scripts/setup.sh passes its arguments to configure
            self.flags_after(where, text, end, ref, self.configure_flag_known)
            return
        # a script's flags may come from the modules beside it it imports
        for mod in re.findall(r"^(?:from|import) (\w+)", source, re.M):
            sibling = os.path.join(os.path.dirname(full), mod + ".py")
            if os.path.isfile(sibling):
                source += read_text(sibling)
        self.flags_after(where, text, end, ref, lambda f: '"%s"' % f in source or "'%s'" % f in source)

    def check_fragment(self, source, line, text):
        where = "%s:%d" % (source, line)
        n = 0
        for m in COOP_CMD.finditer(text):
            if self.check_coop(where, coop_command_text(text, m.start())):
                n += 1
        self.check_refs(where, text)
        self.counts[source] = self.counts.get(source, 0) + n

    def check_all(self):
        rel = lambda p: os.path.relpath(p, self.srcdir)
        mds = [os.path.join(self.srcdir, p) for p in ("README.md", "tests/README.md", "scripts/gpu/README.md")]
        mds += sorted(glob.glob(os.path.join(self.srcdir, "docs", "*.md")))
        for p in mds:
            if not os.path.exists(p):  # a tarball without docs/ or tests/README.md
                continue
            for line, text in md_fragments(p):
                self.check_fragment(rel(p), line, text)
        for pat in ("tests/*.c", "tests/*.sh", "scripts/*.py", "scripts/*.sh"):
            for p in sorted(glob.glob(os.path.join(self.srcdir, pat))):
                for line, text in header_fragments(p):
                    self.check_fragment(rel(p), line, text)


STALE_DOC = """# stale

```sh
coop sim --json --memory arena --policy coop --budget 0.5 --no-such-flag traces/lstm-train-step.ops.jsonl.gz
```

Run `coop replay --policy coop,no-such-policy traces/lstm-train-step.trace.gz`, then
`coop simulate --json LOG`, `scripts/no_such_script.py`, and
`scripts/check_sim_criteria.py FILE --no-such-option`, `scripts/setup.sh --with-no-such-package`
and `tests/no_such_program 10`.
"""


def self_check():
    """The checks catch what they are for: each stale line of STALE_DOC."""
    with tempfile.TemporaryDirectory() as tmp:
        for d in ("docs", "tests", "scripts/gpu", "traces"):
            os.makedirs(os.path.join(tmp, d))
        for f in ("README.md", "tests/README.md", "scripts/gpu/README.md"):
            open(os.path.join(tmp, f), "w").close()
        with open(os.path.join(tmp, "docs", "stale.md"), "w") as f:
            f.write(STALE_DOC)
        for f in ("traces/lstm-train-step.ops.jsonl.gz", "traces/lstm-train-step.trace.gz",
                  "scripts/check_sim_criteria.py", "scripts/setup.sh", "configure.ac", "Makefile.am"):
            os.symlink(os.path.join(SRCDIR, f), os.path.join(tmp, f))
        c = Checker(tmp, Coop(COOP))
        c.check_all()
    wanted = ["lists no --no-such-flag", "unknown policy 'no-such-policy'", "no command 'simulate'",
              "scripts/no_such_script.py: no such file", "does not define --no-such-option",
              "does not define --with-no-such-package", "tests/no_such_program: no such file"]
    missed = [w for w in wanted if not any(w in p for p in c.problems)]
    return missed, c.problems


def main():
    if not os.access(COOP, os.X_OK):
        print("SKIP doc_commands_test: no built coop at %s" % COOP)
        return 77
    missed, got = self_check()
    if missed:
        print("FAIL self-check: not reported: %s\nreported:\n  %s" % (missed, "\n  ".join(got)))
        return 1
    c = Checker(SRCDIR, Coop(COOP))
    c.check_all()
    for source in sorted(c.counts):
        if c.counts[source]:
            print("%-40s %3d coop commands" % (source, c.counts[source]))
    if not c.shared:
        print("note: no ../shared/workloads beside the source tree: its paths were not checked")
    for p in c.problems:
        print("FAIL " + p)
    print("doc_commands_test: %d coop commands (%d without placeholders, run), %d problems" %
          (sum(c.counts.values()), c.ran, len(c.problems)))
    return 1 if c.problems else 0


if __name__ == "__main__":
    sys.exit(main())
