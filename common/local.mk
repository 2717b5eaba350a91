# Internal library shared by the daemon, libhvd, the tools and the tests.
noinst_LTLIBRARIES += common/libhvdcommon.la
common_libhvdcommon_la_SOURCES = \
	common/util.h common/thread.h \
	common/invariant.c common/invariant.h \
	common/log.c common/log.h \
	common/error.c \
	common/conf.c common/conf.h \
	common/reduce.c common/reduce.h common/reduce-internal.h common/reduce_avx2.c \
	common/wire.c common/wire.h \
	common/fusion.c common/fusion.h \
	common/tune_search.c common/tune_search.h \
	common/crc32c.c common/crc32c.h \
	common/strmap.c common/strmap.h \
	common/slurm_hostlist.c common/slurm_hostlist.h \
	common/negotiate.c common/negotiate.h
nodist_common_libhvdcommon_la_SOURCES = proto/hvd.pb-c.c proto/hvd.pb-c.h
common_libhvdcommon_la_CFLAGS = $(AM_CFLAGS) $(ZMQ_CFLAGS) $(PROTOBUF_C_CFLAGS)
common_libhvdcommon_la_LIBADD = $(ZMQ_LIBS) $(PROTOBUF_C_LIBS) -lm
