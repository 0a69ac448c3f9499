#!/bin/sh
# scripts/setup.sh's idempotence, on a stand-in tree: stub configure,
# config.status, make and dpkg-query (every package installed, so apt-get is
# never reached). A second run reconfigures only when given arguments the
# tree was not configured with; a run without arguments keeps them.
set -u
src=${srcdir:-.}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/coop-setup-test-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
mkdir -p "$tmp/tree/scripts" "$tmp/bin"
cp "$src/scripts/setup.sh" "$tmp/tree/scripts/"
cd "$tmp/tree" || exit 1
for f in configure.ac Makefile.am; do : >"$f"; done
sleep 1
: >Makefile.in
# configure records its arguments as config.status --config prints them:
# quoted where they hold a space, with a precious variable from the
# environment after them
cat >configure <<'STUB'
#!/bin/sh
args=""
for a in "$@"; do
    case $a in *" "*) args="$args '$a'" ;; *) args="$args $a" ;; esac
done
printf '#!/bin/sh\necho "%s"\n' "${args# } 'CC=gcc'" >config.status
chmod +x config.status
: >Makefile
echo configured >>runs.log
STUB
chmod +x configure
printf '#!/bin/sh\nprintf "install ok installed"\n' >"$tmp/bin/dpkg-query"
printf '#!/bin/sh\nexit 0\n' >"$tmp/bin/make"
printf '#!/bin/sh\necho "apt-get must not run" >&2; exit 1\n' >"$tmp/bin/apt-get"
cp "$tmp/bin/apt-get" "$tmp/bin/sudo"
chmod +x "$tmp/bin/"*
runs() { # setup.sh arguments...; prints how many times configure ran in total
    PATH="$tmp/bin:$PATH" sh scripts/setup.sh "$@" >/dev/null 2>&1 || echo "setup.sh $* failed"
    wc -l <runs.log 2>/dev/null | tr -d ' '
}
check() { # description, expected configure runs, got
    if [ "$2" = "$3" ]; then
        echo "ok: $1"
    else
        echo "FAIL: $1: configure ran $3 times in all, expected $2"
        failures=$((failures + 1))
    fi
}
check "first run configures" 1 "$(runs)"
check "a second run without arguments does not" 1 "$(runs)"
check "arguments the tree was not configured with reconfigure" 2 "$(runs --with-cuda=/opt/cuda 'CFLAGS=-O1 -g')"
check "the same arguments again do not" 2 "$(runs --with-cuda=/opt/cuda 'CFLAGS=-O1 -g')"
check "no arguments keep the configuration" 2 "$(runs)"
check "one of the same arguments does not reconfigure" 2 "$(runs 'CFLAGS=-O1 -g')"
check "another value of one does" 3 "$(runs --with-cuda=/usr/local/cuda 'CFLAGS=-O1 -g')"
[ "$(./config.status --config)" = "--with-cuda=/usr/local/cuda 'CFLAGS=-O1 -g' 'CC=gcc'" ] ||
    { echo "FAIL: configured with $(./config.status --config)"; failures=$((failures + 1)); }
exit $((failures != 0))
