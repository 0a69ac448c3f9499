#!/bin/sh
# Idempotent set-up on Debian 12: installs missing build and test dependencies
# with apt-get, then autoreconf / configure / make. Extra arguments go to configure.
set -eu
cd "$(dirname "$0")/.."

PKGS="autoconf automake libtool pkg-config make gcc libjemalloc-dev libcmocka-dev zlib1g-dev libjansson-dev python3"
# What make check's Python tests use: torch 1.13's _memory_viz reads coop's snapshots,
# the recorders run a small model (torchvision's resnet in train_compare's dry run),
# the plot scripts draw with matplotlib.
PKGS="$PKGS python3-torch python3-torchvision python3-numpy python3-matplotlib"
# An optimized BLAS for Debian's torch: without it torch uses the reference BLAS, about
# 30x slower matrix products, which skews the op times that the recorders write
# (traces/README.md, "Recording environment").
PKGS="$PKGS libopenblas0-pthread"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup: installing:$missing" >&2
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

# autoreconf when configure or Makefile.in is missing or older than what
# generates it: configure.ac, Makefile.am or any fragment it includes
# (src/**/*.mk, tests/**/*.mk, scripts/*.mk).
needs_autoreconf() {
    [ -x configure ] && [ -f Makefile.in ] || return 0
    [ configure.ac -nt configure ] && return 0
    [ configure.ac -nt Makefile.in ] && return 0
    [ -n "$(find src tests scripts -name '*.mk' -newer Makefile.in 2>/dev/null)" ] &&
        return 0
    [ Makefile.am -nt Makefile.in ] && return 0
    return 1
}
if needs_autoreconf; then
    autoreconf -fi
fi
# configure again when an argument is given that the build was not configured
# with (config.status --config lists those it was, shell-quoted, with any
# precious variable configure took from the environment): a second run with
# other arguments dropped them without a word. No arguments keep the
# configuration.
configured_with() {
    [ $# -gt 0 ] || return 0
    have=$(./config.status --config 2>/dev/null) || return 1
    for want in "$@"; do
        eval "set -- $have"
        found=false
        for a in "$@"; do
            [ "$a" = "$want" ] && found=true
        done
        $found || return 1
    done
}
if [ ! -f Makefile ] || [ configure -nt config.status ] || ! configured_with "$@"; then
    ./configure "$@"
fi
make -j"$(nproc)"
