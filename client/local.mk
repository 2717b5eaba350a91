# libhvd: the client library every worker links. Exports exactly what
# libhvd.sym lists.
lib_LTLIBRARIES += client/libhvd.la
include_HEADERS += include/hvd.h
client_libhvd_la_SOURCES = \
	client/hvd.c \
	client/backend.h \
	client/cpu_backend.c \
	client/fastpath.c client/fastpath.h \
	client/tcp.c client/tcp.h \
	client/timeline.c client/timeline.h \
	client/gpu_module.h
client_libhvd_la_CFLAGS = $(AM_CFLAGS) $(ZMQ_CFLAGS) $(PROTOBUF_C_CFLAGS) -O3
client_libhvd_la_LIBADD = common/libhvdcommon.la -lrt -ldl
client_libhvd_la_LDFLAGS = $(AM_LDFLAGS) -version-info $(HVD_LT_VERSION) \
	-Wl,--version-script=$(top_srcdir)/client/libhvd.sym
EXTRA_client_libhvd_la_DEPENDENCIES = client/libhvd.sym
EXTRA_DIST += client/libhvd.sym client/hvd.pc.in
pkgconfig_DATA += client/hvd.pc

include client/nccl.mk
