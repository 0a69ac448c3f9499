# Recording scripts (Python; Debian's python3-torch): their test runs the
# recorders on small models and validates the shipped traces in traces/.
# It exits 77 (SKIP) where python3-torch is absent.
TESTS += tests/python/test_record_ops.py
EXTRA_DIST += tests/python/test_record_ops.py tests/python/debian_torch.py
# The replay criteria checker: standard library only, always runs.
TESTS += tests/python/test_check_replay_criteria.py
EXTRA_DIST += tests/python/test_check_replay_criteria.py tests/python/jsonl_script.py
# The sim criteria checker: standard library only, always runs.
TESTS += tests/python/test_check_sim_criteria.py
EXTRA_DIST += tests/python/test_check_sim_criteria.py
# atomic_file.py, the scripts' writer: standard library only, always runs.
TESTS += tests/python/test_atomic_file.py
EXTRA_DIST += tests/python/test_atomic_file.py
# interrupt.py: Ctrl-C in any script is one line, status 130, no partial
# output. Standard library only, always runs.
TESTS += tests/python/test_interrupt.py
EXTRA_DIST += tests/python/test_interrupt.py
# long_trace.py's command line and output (bad arguments, a failed write):
# standard library only, always runs.
TESTS += tests/python/test_long_trace.py
EXTRA_DIST += tests/python/test_long_trace.py
# compare_sim_lib.py against a stand-in coop: standard library only, always runs.
TESTS += tests/python/test_compare_sim_lib.py
EXTRA_DIST += tests/python/test_compare_sim_lib.py
# The GPU scripts on the CPU (--dry-run, exit 77 without a device, readers);
# exits 77 (SKIP) where python3-torch is absent.
TESTS += tests/python/test_gpu_scripts.py
EXTRA_DIST += tests/python/test_gpu_scripts.py

# The host-side figures held to what a real GPU measured (scripts/gpu/results).
TESTS += tests/python/test_gpu_results.py
EXTRA_DIST += tests/python/test_gpu_results.py

# scripts/setup.sh's idempotence on a stand-in tree (stubbed configure, make,
# dpkg-query): a second run reconfigures only for arguments not yet applied.
TESTS += tests/setup_script_test.sh
EXTRA_DIST += tests/setup_script_test.sh
