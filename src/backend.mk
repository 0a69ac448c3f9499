# src build fragment (included by Makefile.am): the CUDA backend.
# The driver is loaded with dlopen at run time: only cuda.h is needed to build,
# and libcoop has no link-time dependency on libcuda.
if HAVE_CUDA
libcoop_la_SOURCES += src/backend_cuda.c src/cuda_driver.c src/cuda_driver.h

# Its tests (cmocka programs, and scripts that run them) need cmocka.
if HAVE_CMOCKA
# A mock driver (libmockcuda.so) that lets the backend be tested without a GPU.
check_LTLIBRARIES += tests/libmockcuda.la
tests_libmockcuda_la_SOURCES = tests/mock_cuda_driver.c tests/cuda_mock_counters.h
tests_libmockcuda_la_CPPFLAGS = $(CUDA_CPPFLAGS)
tests_libmockcuda_la_CFLAGS = $(AM_CFLAGS)
# -rpath makes libtool build a shared object although it is never installed
tests_libmockcuda_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere

check_PROGRAMS += tests/backend_cuda_mock_test
TESTS += tests/backend_cuda_mock_test
tests_backend_cuda_mock_test_SOURCES = tests/backend_cuda_mock_test.c
tests_backend_cuda_mock_test_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_backend_cuda_mock_test_CFLAGS = $(TESTCFLAGS) -DCOOP_TEST_BUILDDIR='"$(abs_top_builddir)"'
tests_backend_cuda_mock_test_LDADD = $(TESTLIBS)
tests_backend_cuda_mock_test_LDFLAGS = $(TESTLDFLAGS)

check_PROGRAMS += tests/cuda_driver_load_test
TESTS += tests/cuda_driver_load_test
tests_cuda_driver_load_test_SOURCES = tests/cuda_driver_load_test.c
tests_cuda_driver_load_test_CFLAGS = $(TESTCFLAGS) -DCOOP_TEST_BUILDDIR='"$(abs_top_builddir)"'
tests_cuda_driver_load_test_LDADD = $(TESTLIBS)
tests_cuda_driver_load_test_LDFLAGS = $(TESTLDFLAGS)

# The allocator's own tests on the CUDA backend over the mock driver: each
# includes the host program's source (tests/cuda_stream_map.h explains how).
check_PROGRAMS += tests/cuda_mock_model_test tests/cuda_mock_fault_sweep_test \
	tests/cuda_mock_stress_test
TESTS += tests/cuda_mock_model_test tests/cuda_mock_fault_sweep_test tests/cuda_mock_stress_test
CUDA_MOCK_TEST_CFLAGS = $(TESTCFLAGS) $(CUDA_CPPFLAGS) -DCOOP_TEST_BUILDDIR='"$(abs_top_builddir)"'
tests_cuda_mock_model_test_SOURCES = tests/cuda_mock_model_test.c tests/cuda_mock.h \
	tests/cuda_stream_map.h
tests_cuda_mock_model_test_CFLAGS = $(CUDA_MOCK_TEST_CFLAGS)
tests_cuda_mock_model_test_LDADD = $(TESTLIBS)
tests_cuda_mock_model_test_LDFLAGS = $(TESTLDFLAGS)
tests_cuda_mock_fault_sweep_test_SOURCES = tests/cuda_mock_fault_sweep_test.c tests/cuda_mock.h \
	tests/cuda_stream_map.h
tests_cuda_mock_fault_sweep_test_CFLAGS = $(CUDA_MOCK_TEST_CFLAGS)
tests_cuda_mock_fault_sweep_test_LDADD = $(TESTLIBS)
tests_cuda_mock_fault_sweep_test_LDFLAGS = $(TESTLDFLAGS)
tests_cuda_mock_stress_test_SOURCES = tests/cuda_mock_stress_test.c tests/cuda_mock.h \
	tests/cuda_stream_map.h
tests_cuda_mock_stress_test_CFLAGS = $(CUDA_MOCK_TEST_CFLAGS)
tests_cuda_mock_stress_test_LDADD = $(TESTLIBS)
tests_cuda_mock_stress_test_LDFLAGS = $(TESTLDFLAGS)

# tests/cuda_map_cost [REPS [PAGES]]: the driver's mapping and freeing costs
# (not a test; it calls the driver's VMM entry points itself, with cuda.h's types)
check_PROGRAMS += tests/cuda_map_cost
tests_cuda_map_cost_SOURCES = tests/cuda_map_cost.c tests/cuda_device.h
tests_cuda_map_cost_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
tests_cuda_map_cost_CFLAGS = $(TESTCFLAGS)
tests_cuda_map_cost_LDADD = $(TESTLIBS)
tests_cuda_map_cost_LDFLAGS = $(TESTLDFLAGS)

# A CUDA pool (and the PyTorch ABI on CUDA) in a forked child: refused
# without a driver call (tests/README.md, "Process lifecycle").
check_PROGRAMS += tests/lifecycle_cuda_mock_test
TESTS += tests/lifecycle_cuda_mock_test
tests_lifecycle_cuda_mock_test_SOURCES = tests/lifecycle_cuda_mock_test.c tests/cuda_mock.h \
	tests/cases_in_children.h tests/lifecycle_child.h
tests_lifecycle_cuda_mock_test_CFLAGS = $(CUDA_MOCK_TEST_CFLAGS)
tests_lifecycle_cuda_mock_test_LDADD = $(TESTLIBS)
tests_lifecycle_cuda_mock_test_LDFLAGS = $(TESTLDFLAGS)

# The real-GPU tests against the mock, so that their logic runs in every build,
# and the device calls that run them (scripts/gpu/device_tests.sh, and
# scripts/gpu/pending_device_checks.sh, the next GPU session's first), likewise.
TESTS += tests/cuda_tests_on_mock.sh tests/device_tests_script_test.sh \
	tests/pending_checks_script_test.sh
EXTRA_DIST += tests/device_tests_script_test.sh tests/pending_checks_script_test.sh
endif
# make check builds check_LTLIBRARIES with the programs, before any test runs
else
libcoop_la_SOURCES += src/backend_cuda_absent.c
endif

# The allocator's tests on a real GPU (skipped without a driver or device):
# the CUDA backend's own test, the stress test and the fault sweep.
if HAVE_CMOCKA
check_PROGRAMS += tests/backend_cuda_test tests/backend_cuda_stress_test \
	tests/backend_cuda_fault_test
TESTS += tests/backend_cuda_test tests/backend_cuda_stress_test tests/backend_cuda_fault_test
EXTRA_DIST += tests/cuda_tests_on_mock.sh
tests_backend_cuda_test_SOURCES = tests/backend_cuda_test.c tests/pool_sequence.h \
	tests/cuda_stream_map.h tests/cuda_device.h
tests_backend_cuda_test_CFLAGS = $(TESTCFLAGS)
tests_backend_cuda_test_LDADD = $(TESTLIBS)
tests_backend_cuda_test_LDFLAGS = $(TESTLDFLAGS)
tests_backend_cuda_stress_test_SOURCES = tests/backend_cuda_stress_test.c \
	tests/cuda_stream_map.h tests/cuda_device.h
tests_backend_cuda_stress_test_CFLAGS = $(TESTCFLAGS)
tests_backend_cuda_stress_test_LDADD = $(TESTLIBS)
tests_backend_cuda_stress_test_LDFLAGS = $(TESTLDFLAGS)
tests_backend_cuda_fault_test_SOURCES = tests/backend_cuda_fault_test.c \
	tests/cuda_stream_map.h tests/cuda_device.h
tests_backend_cuda_fault_test_CFLAGS = $(TESTCFLAGS)
tests_backend_cuda_fault_test_LDADD = $(TESTLIBS)
tests_backend_cuda_fault_test_LDFLAGS = $(TESTLDFLAGS)
endif

