# Benchmarks build only for `make bench` (EXTRA_PROGRAMS), never for `make`.
# Each prints one parseable line per result; benchmarks/run-*.sh run them
# beside their peers (Open MPI, torch.distributed gloo) and print ratios.
EXTRA_PROGRAMS =
include %D%/reduce.mk
include %D%/nccl.mk

EXTRA_PROGRAMS += %D%/bench_collective
%C%_bench_collective_SOURCES = %D%/bench_collective.c %D%/bench_set.h %D%/bench_window.h
%C%_bench_collective_LDADD = client/libhvd.la

# bench_shm: the one-node shared-memory data plane alone (no daemon)
EXTRA_PROGRAMS += %D%/bench_shm
%C%_bench_shm_SOURCES = %D%/bench_shm.c client/cpu_backend.c client/cpu_stream.c client/cpu_multi.c client/cpu_gather.c \
	client/cpu_rsring.c client/cpu_set.c client/backend.h client/fastpath.c \
	client/fastpath.h client/tcp.c client/tcp.h client/shared_arena.c client/shared_arena.h \
	client/zero_copy.c client/slot_mode.c client/cpu_internal.h
%C%_bench_shm_CPPFLAGS = $(CLIENT_INTERNAL_CPPFLAGS)
%C%_bench_shm_CFLAGS = $(AM_CFLAGS) $(PROTOBUF_C_CFLAGS) -O3
%C%_bench_shm_LDADD = common/libhvdcommon.la -lrt

EXTRA_PROGRAMS += %D%/bench_step
%C%_bench_step_SOURCES = %D%/bench_step.c %D%/step_model.h
%C%_bench_step_LDADD = client/libhvd.la -lm

EXTRA_PROGRAMS += %D%/bench_control
%C%_bench_control_SOURCES = %D%/bench_control.c %D%/step_model.h client/fastpath.c
%C%_bench_control_CPPFLAGS = $(CLIENT_INTERNAL_CPPFLAGS)
%C%_bench_control_CFLAGS = $(AM_CFLAGS) $(ZMQ_CFLAGS) $(PROTOBUF_C_CFLAGS)
%C%_bench_control_LDADD = common/libhvdcommon.la

# bench_negotiate: the root's negotiation table alone (no messages)
EXTRA_PROGRAMS += %D%/bench_negotiate
%C%_bench_negotiate_SOURCES = %D%/bench_negotiate.c %D%/step_model.h
%C%_bench_negotiate_CFLAGS = $(AM_CFLAGS) $(PROTOBUF_C_CFLAGS)
%C%_bench_negotiate_LDADD = common/libhvdcommon.la

# core_rtt: the vCPUs' placement (a cache line's round trip) beside each round
EXTRA_PROGRAMS += %D%/core_rtt
%C%_core_rtt_LDADD = -lpthread

# The Open MPI peer, compiled with mpicc when configure found it.
%D%/mpi_collective: %D%/mpi_collective.c %D%/bench_set.h %D%/bench_window.h
	$(AM_V_CC)if test -n "$(MPICC)"; then $(MPICC) -O2 -o $@ $(srcdir)/%D%/mpi_collective.c; \
	else echo "bench: mpicc not found; install libopenmpi-dev for the MPI peer" >&2; fi

%D%/mpi_step: %D%/mpi_step.c %D%/step_model.h
	$(AM_V_CC)if test -n "$(MPICC)"; then $(MPICC) -O2 -o $@ $(srcdir)/%D%/mpi_step.c -lm; \
	else echo "bench: mpicc not found; install libopenmpi-dev for the MPI peer" >&2; fi

# tests/delay_proxy gives the emulated nodes of run-step.sh NETNS=1 latency
bench: $(EXTRA_PROGRAMS) %D%/mpi_collective %D%/mpi_step tests/delay_proxy$(EXEEXT)
CLEANFILES += $(EXTRA_PROGRAMS) %D%/mpi_collective %D%/mpi_step
EXTRA_DIST += %D%/mpi_collective.c %D%/bench_set.h %D%/bench_window.h %D%/mpi_step.c %D%/run-allreduce.sh %D%/gloo_collective.py %D%/torch_compile.py \
	%D%/run-step.sh %D%/run-control.sh %D%/run-collectives.sh %D%/netns-job.sh %D%/run-delay-proxy.sh \
	%D%/run-tf.sh %D%/tf_collective.py %D%/tf_mwms.py %D%/peers.sh %D%/run-elastic.sh %D%/elastic_recovery.py \
	%D%/run-shm-chunk.sh %D%/elastic_grow.py %D%/run-knobs.sh
# hvd.torch beside Horovod 0.28.1 (scripts/horovod.sh), gloo and DDP
EXTRA_DIST += %D%/run-python.sh %D%/run-scaling.sh %D%/torch_peers.py %D%/torch_outofplace.py \
	%D%/run-outofplace.sh %D%/torch_call_cost.py %D%/horovod_rendezvous.py %D%/horovod_step.py scripts/horovod.sh \
	%D%/run-one-rank.sh %D%/torch_one_rank.py %D%/run-synthetic.sh
