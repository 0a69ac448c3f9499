"""matplotlib's pyplot on the Agg backend (PNG files, no display), for the
plot scripts: a python3 without matplotlib (another interpreter first on PATH)
gets one line and exit status 1, not an ImportError traceback."""

import sys


def pyplot(script):
    """Returns matplotlib.pyplot with the Agg backend selected; exits 1 with
    "SCRIPT: needs matplotlib ..." where it cannot be imported."""
    try:
        import matplotlib
    except ImportError as e:
        sys.exit("%s: needs matplotlib (Debian: python3-matplotlib, which scripts/setup.sh "
                 "installs; or run it with /usr/bin/python3): %s" % (script, e))
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
