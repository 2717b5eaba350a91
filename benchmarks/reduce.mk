# bench_reduce: GB/s of the reduction kernels, portable vs run-time choice
# vs memcpy. Built only by `make bench`. Included from benchmarks/local.mk.
EXTRA_PROGRAMS += %D%/bench_reduce
%C%_bench_reduce_SOURCES = %D%/bench_reduce.c
%C%_bench_reduce_LDADD = common/libhvdcommon.la
