# bench_nccl: allreduce bus bandwidth through libhvd-nccl beside raw
# ncclAllReduce on the same GPUs (single tensors and 64 fused ones). Built
# only by `make bench` (EXTRA_PROGRAMS) and only when configure found CUDA
# and NCCL; skips (77) on a host without a GPU. Included from
# benchmarks/local.mk.
if HAVE_NCCL
EXTRA_PROGRAMS += %D%/bench_nccl
%C%_bench_nccl_SOURCES = %D%/bench_nccl.c tests/gpu/gpu_launch.c tests/gpu/gpu_launch.h
%C%_bench_nccl_CPPFLAGS = $(CLIENT_INTERNAL_CPPFLAGS) -I$(top_srcdir)/tests/gpu $(NCCL_CFLAGS) $(CUDA_CFLAGS)
%C%_bench_nccl_CFLAGS = $(AM_CFLAGS) $(PROTOBUF_C_CFLAGS)
%C%_bench_nccl_LDADD = $(NCCL_LIBS) $(CUDA_LIBS) -ldl -lm
# it loads the module at run time
EXTRA_%C%_bench_nccl_DEPENDENCIES = client/libhvd-nccl.la
endif
