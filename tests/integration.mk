# Integration tests of the core: real hvd-coordinatord daemons on private
# runtime directories, real worker processes (tests/worker_collectives, which
# links libhvd only), driven by the tests/test-*.sh scripts below through
# tests/lib/launch.sh. Environment: AM_TESTS_ENVIRONMENT in tests/local.mk.
check_PROGRAMS += %D%/worker_collectives
%C%_worker_collectives_SOURCES = %D%/worker/worker.h %D%/worker/main.c %D%/worker/common.c \
	%D%/worker/allreduce.c %D%/worker/streams.c %D%/worker/control.c %D%/worker/contract.c \
	%D%/worker/flows.c
%C%_worker_collectives_LDADD = client/libhvd.la -lm
check_PROGRAMS += %D%/worker_timeline
%C%_worker_timeline_SOURCES = %D%/worker_timeline.c
%C%_worker_timeline_LDADD = client/libhvd.la -lm
check_PROGRAMS += %D%/worker_fastpath
check_PROGRAMS += %D%/worker_faults
%C%_worker_faults_SOURCES = %D%/worker_faults.c
%C%_worker_faults_LDADD = client/libhvd.la -lpthread
%C%_worker_fastpath_SOURCES = %D%/worker_fastpath.c
%C%_worker_fastpath_LDADD = client/libhvd.la
check_PROGRAMS += %D%/worker_autotune
%C%_worker_autotune_SOURCES = %D%/worker_autotune.c
%C%_worker_autotune_LDADD = client/libhvd.la
check_PROGRAMS += %D%/bad_wire
%C%_bad_wire_SOURCES = %D%/bad_wire.c
%C%_bad_wire_CFLAGS = $(AM_CFLAGS) $(ZMQ_CFLAGS) $(PROTOBUF_C_CFLAGS)
%C%_bad_wire_LDADD = client/libhvd.la common/libhvdcommon.la

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
	%D%/test-api-contract.sh \
	%D%/test-timeline.sh \
	%D%/test-fastpath.sh \
	%D%/test-faults.sh \
	%D%/test-heartbeat.sh \
	%D%/test-deadlines.sh \
	%D%/test-aggregation.sh \
	%D%/test-relay.sh \
	%D%/test-bad-wire.sh \
	%D%/test-autotune.sh \
	%D%/valgrind-daemon.sh
TESTS += $(%C%_integration_tests)
EXTRA_DIST += $(%C%_integration_tests) %D%/test-collectives.sh %D%/test-daemon-lost.sh docs/FAULTS.md


# network faults between two test hosts (namespaces): tests/lib/netfault.sh
check_PROGRAMS += %D%/worker_netfault %D%/delay_proxy
%C%_worker_netfault_LDADD = client/libhvd.la
%C%_netfault_tests = %D%/test-netfault-peer.sh %D%/test-netfault-partition.sh \
	%D%/test-netfault-loss.sh %D%/test-netfault-slow.sh
TESTS += $(%C%_netfault_tests) %D%/test-netns-delay.sh %D%/test-delay-proxy.sh
EXTRA_DIST += $(%C%_netfault_tests) %D%/lib/netfault.sh %D%/test-netns-delay.sh %D%/test-delay-proxy.sh \
	%D%/lib/delay_proxy_check.py
