# Tests: Check unit tests, multi-process integration tests, pytest.
AM_TESTS_ENVIRONMENT = \
	HVD_BUILDDIR='$(abs_top_builddir)'; export HVD_BUILDDIR; \
	HVD_SRCDIR='$(abs_top_srcdir)'; export HVD_SRCDIR; \
	PYTHON='$(PYTHON)'; export PYTHON; \
	HVD_ASAN_RUNTIME='$(ASAN_RUNTIME)'; export HVD_ASAN_RUNTIME; \
	HVD_SANITIZER_FLAGS='$(SANITIZER_FLAGS)'; export HVD_SANITIZER_FLAGS;

EXTRA_DIST += %D%/lib/launch.sh %D%/lib/launch-multi.sh %D%/lib/common.sh %D%/lib/netpair.sh \
	%D%/lib/timeline_check.py

# the demo (scripts/demo.sh) and its example, examples/train_mlp, on the digits
TESTS += %D%/test-demo.sh
EXTRA_DIST += %D%/test-demo.sh %D%/lib/train_mlp.sh scripts/demo.sh

# several nodes: daemons on loopback, and real test hosts in namespaces
check_PROGRAMS += %D%/worker_smoke %D%/worker_cycle
%C%_worker_smoke_LDADD = client/libhvd.la
%C%_worker_cycle_LDADD = client/libhvd.la
TESTS += %D%/test-multinode.sh %D%/test-netns.sh %D%/test-stall.sh %D%/test-curve.sh %D%/test-local-auth.sh \
	%D%/test-daemon-resources.sh %D%/test-ring-checksum.sh %D%/test-tcp-send-thread.sh \
	%D%/test-ring-knobs.sh %D%/test-wait-cpu.sh
EXTRA_DIST += %D%/test-multinode.sh %D%/test-netns.sh %D%/test-stall.sh %D%/test-curve.sh %D%/test-local-auth.sh \
	%D%/test-daemon-resources.sh %D%/test-ring-checksum.sh %D%/test-tcp-send-thread.sh \
	%D%/test-ring-knobs.sh %D%/test-wait-cpu.sh

include %D%/reduce.mk
include %D%/unit.mk
include %D%/integration.mk
include %D%/launchers.mk
include %D%/tools.mk
include %D%/elastic.mk
include %D%/service.mk
include %D%/python.mk
include %D%/tf.mk
include %D%/gpu.mk
include %D%/style.mk

# The tests scripts/test.sh runs again on the CPU-only build: everything
# whose build differs with and without the NCCL module.
CPU_VARIANT_TESTS = $(foreach t,$(TESTS),$(if $(findstring /check_,$(t))$(findstring gpu,$(t)),$(t))) \
	%D%/test-collectives-np2.sh %D%/test-collectives-np3.sh %D%/test-multinode.sh %D%/test-relay.sh \
	%D%/test-aggregation.sh \
	fuzz/regress-dispatch %D%/test-bad-wire.sh
print-cpu-tests:
	@echo $(CPU_VARIANT_TESTS)
