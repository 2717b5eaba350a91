# libhvd: the client library every worker links. Exports exactly what
# libhvd.sym lists. client.h is the private state and the modules'
# interfaces; settings.c alone reads the environment.
lib_LTLIBRARIES += client/libhvd.la
include_HEADERS += include/hvd.h
client_libhvd_la_SOURCES = \
	client/client.h \
	client/api.c \
	client/handle.c \
	client/outbuf.c \
	client/init.c \
	client/settings.c client/settings.h \
	client/launcher_env.c client/launcher_env.h \
	client/launcher_join.c client/launcher_join.h \
	client/bg.c \
	client/link.c \
	client/schedule.c \
	client/fastpath_turn.c \
	client/gpu.c \
	client/pset.c \
	client/elastic.c \
	client/backend.h \
	client/cpu_backend.c \
	client/cpu_stream.c \
	client/cpu_multi.c \
	client/cpu_gather.c \
	client/cpu_rsring.c \
	client/cpu_set.c \
	client/shared_arena.c client/shared_arena.h \
	client/zero_copy.c client/cpu_internal.h \
	client/slot_mode.c \
	client/fastpath.c client/fastpath.h \
	client/tcp.c client/tcp.h \
	client/timeline.c client/timeline.h \
	client/tune_meter.c client/tune_meter.h \
	client/gpu_module.h
client_libhvd_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/daemon
client_libhvd_la_CFLAGS = $(AM_CFLAGS) $(ZMQ_CFLAGS) $(PROTOBUF_C_CFLAGS) -O3
# the daemon's library: a private daemon for a job a cluster launcher started
client_libhvd_la_LIBADD = daemon/libhvddaemon.la -lrt -ldl
client_libhvd_la_LDFLAGS = $(AM_LDFLAGS) -version-info $(HVD_LT_VERSION) \
	-Wl,--version-script=$(top_srcdir)/client/libhvd.sym
EXTRA_client_libhvd_la_DEPENDENCIES = client/libhvd.sym
EXTRA_DIST += client/libhvd.sym client/hvd.pc.in
pkgconfig_DATA += client/hvd.pc

include client/nccl.mk
