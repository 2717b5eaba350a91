# Integration tests of the core: real hvd-coordinatord daemons on private
# runtime directories, real worker processes (tests/worker_collectives, which
# links libhvd only), driven by the tests/test-*.sh scripts below through
# tests/lib/launch.sh. Environment: AM_TESTS_ENVIRONMENT in tests/local.mk.
check_PROGRAMS += %D%/worker_collectives
%C%_worker_collectives_SOURCES = %D%/worker_collectives.c
%C%_worker_collectives_LDADD = client/libhvd.la -lm

%C%_integration_tests = \
	%D%/test-collectives-np1.sh \
	%D%/test-collectives-np2.sh \
	%D%/test-collectives-np3.sh \
	%D%/test-collectives-np4.sh \
	%D%/test-two-jobs.sh \
	%D%/test-fusion-status.sh \
	%D%/test-kill-worker.sh \
	%D%/test-start-timeout.sh \
	%D%/test-bad-input.sh \
	%D%/test-daemon-stop.sh \
	%D%/test-daemon-killed.sh \
	%D%/test-mismatch-retry.sh \
	%D%/test-process-sets.sh \
	%D%/test-table-capacity.sh \
	%D%/test-api-contract.sh
TESTS += $(%C%_integration_tests)
EXTRA_DIST += $(%C%_integration_tests) %D%/test-collectives.sh %D%/test-daemon-lost.sh

# Expected failures: each script checks behaviour that a reported core bug
# breaks; remove the line when the bug is fixed (make check then says XPASS).
# - one tensor name used in two disjoint process sets at once fails with
#   "rank R is not a member of process set S" (the negotiation table is keyed
#   by name only); grouped ops inside a process set advance only the members'
#   group counter, so later grouped ops of the whole job fail with
#   "submitted it in different groups"
XFAIL_TESTS += %D%/test-process-sets.sh
# - the negotiation table never frees completed rows: after
#   max_tensors_per_job distinct names (65536 by default; Horovod-style
#   "allreduce.noname.N" names grow forever) the job is aborted with
#   "tensor table of the job is full"
XFAIL_TESTS += %D%/test-table-capacity.sh
# - when hvd-coordinatord dies (kill -9), workers never notice: pending
#   collectives hang forever instead of failing
XFAIL_TESTS += %D%/test-daemon-killed.sh
