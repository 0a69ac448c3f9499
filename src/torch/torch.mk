# src/torch build fragment (included by Makefile.am): the PyTorch integration.
libcoop_la_SOURCES += src/torch/torch_abi.c src/torch/torch_abi.h \
	src/torch/alloc_conf.c src/torch/alloc_conf.h src/torch/c_numeric.h \
	src/torch/history.c src/torch/history.h \
	src/torch/torch_snapshot.c

if HAVE_CMOCKA
check_PROGRAMS += tests/alloc_conf_test
TESTS += tests/alloc_conf_test
tests_alloc_conf_test_SOURCES = tests/alloc_conf_test.c
tests_alloc_conf_test_CFLAGS = $(TESTCFLAGS)
tests_alloc_conf_test_LDADD = $(TESTLIBS)
tests_alloc_conf_test_LDFLAGS = $(TESTLDFLAGS)

check_PROGRAMS += tests/torch_abi_test
TESTS += tests/torch_abi_test
tests_torch_abi_test_SOURCES = tests/torch_abi_test.c tests/utf8_valid.h
tests_torch_abi_test_CFLAGS = $(TESTCFLAGS)
tests_torch_abi_test_LDADD = $(TESTLIBS)
tests_torch_abi_test_LDFLAGS = $(TESTLDFLAGS)

# cases that need a process of their own (a configuration each, or the
# state before the configuration is loaded): each runs in a forked child
check_PROGRAMS += tests/torch_abi_fresh_test
TESTS += tests/torch_abi_fresh_test
tests_torch_abi_fresh_test_SOURCES = tests/torch_abi_fresh_test.c tests/cases_in_children.h
tests_torch_abi_fresh_test_CFLAGS = $(TESTCFLAGS)
tests_torch_abi_fresh_test_LDADD = $(TESTLIBS)
tests_torch_abi_fresh_test_LDFLAGS = $(TESTLDFLAGS)

# more than one device: pools, limits, counters and histories per device,
# misuse naming a device, init's count; a forked child per case, as above
check_PROGRAMS += tests/torch_devices_test
TESTS += tests/torch_devices_test
tests_torch_devices_test_SOURCES = tests/torch_devices_test.c tests/cases_in_children.h
tests_torch_devices_test_CFLAGS = $(TESTCFLAGS)
tests_torch_devices_test_LDADD = $(TESTLIBS)
tests_torch_devices_test_LDFLAGS = $(TESTLDFLAGS)

# the ABI held at a known lock or free by link-time wraps, so that a fork or
# an init between two of its steps is one deterministic run (forks: not in
# CI's ThreadSanitizer list)
check_PROGRAMS += tests/torch_lock_seams_test
TESTS += tests/torch_lock_seams_test
tests_torch_lock_seams_test_SOURCES = tests/torch_lock_seams_test.c tests/cases_in_children.h \
	tests/lifecycle_child.h
tests_torch_lock_seams_test_CFLAGS = $(TESTCFLAGS)
tests_torch_lock_seams_test_LDADD = $(TESTLIBS)
tests_torch_lock_seams_test_LDFLAGS = $(TESTLDFLAGS) -Wl,--wrap=pthread_mutex_lock,--wrap=free

# the history ring alone, with host allocations counted and failed on
# demand (tests/host_alloc_fault.h; HOST_ALLOC_WRAP is in tests/harden.mk)
check_PROGRAMS += tests/torch_history_test
TESTS += tests/torch_history_test
tests_torch_history_test_SOURCES = tests/torch_history_test.c tests/host_alloc_fault.c \
	tests/host_alloc_fault.h
tests_torch_history_test_CFLAGS = $(TESTCFLAGS) $(JANSSON_CFLAGS)
tests_torch_history_test_LDADD = $(TESTLIBS) $(JANSSON_LIBS)
tests_torch_history_test_LDFLAGS = $(TESTLDFLAGS) $(HOST_ALLOC_WRAP)
endif

# Python tests of the ABI and the python/coop helper (ctypes, host backend);
# tests/ctypes_layout prints coop.h's struct layouts for their ctypes mirrors.
check_PROGRAMS += tests/ctypes_layout
tests_ctypes_layout_SOURCES = tests/ctypes_layout.c
tests_ctypes_layout_CFLAGS = $(TESTCFLAGS)
TESTS += tests/python_tests.sh
EXTRA_DIST += tests/python_tests.sh tests/python/test_torch_abi.py docs/pytorch.md

# The Python package: make install puts it under $(pythondir)/coop, with the
# directory libcoop.so was installed to (python/coop/_build_config.py).
if HAVE_PYTHON
coopdir = $(pythondir)/coop
coop_PYTHON = python/coop/__init__.py python/coop/native.py python/coop/torch.py \
	python/coop/run.py
nodist_coop_PYTHON = python/coop/_build_config.py
# Rewritten by every make that asks for it (install does), not only when the
# Makefile changes: `make install prefix=DIR` gives another libdir without
# changing the Makefile, and a copy kept from it would send a later plain
# `make install`'s package to DIR's library. Replaced only when its text
# changes, so a second install of the same libdir leaves it as it was. The
# path is in double quotes, as in automake's install rules (a ' in it broke
# single quotes), and a \ or " in it is escaped for Python's string.
python/coop/_build_config.py: coop-build-config-always
	$(AM_V_GEN)mkdir -p python/coop && l="$(libdir)" && \
	{ echo '"""Written by make: where make install put libcoop.so."""' && \
	  printf 'LIBDIR = "%s"\n' "$$(printf '%s\n' "$$l" | sed 's/[\\"]/\\&/g')"; } > $@.tmp && \
	if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv -f $@.tmp $@; fi
# no file, no recipe: make takes it as updated at every run (the FORCE idiom;
# a .PHONY here, inside the conditional, is refused by automake)
coop-build-config-always:
CLEANFILES += python/coop/_build_config.py python/coop/_build_config.py.tmp
endif
