# hvd-coordinatord: a thin main() over an internal library the tests and
# hvdrun (embedded daemon) link too.
noinst_LTLIBRARIES += daemon/libhvddaemon.la
daemon_libhvddaemon_la_SOURCES = \
	daemon/coordinator.h daemon/internal.h \
	daemon/loop.c daemon/service.c daemon/io.c daemon/feed.c \
	daemon/job.c daemon/worker.c daemon/join.c daemon/root.c daemon/tree.c daemon/elastic.c daemon/offer.c \
	daemon/autotune.c daemon/uplink.c daemon/batch.c daemon/pool.c daemon/tally.c daemon/relay.c daemon/control.c \
	daemon/http.c daemon/http.h \
	daemon/metrics.c daemon/metrics.h \
	daemon/zap.c daemon/zap.h \
	daemon/embedded.c daemon/embedded.h
# sd_notify comes from libsystemd when configure found it; the daemon
# speaks the notify protocol itself otherwise.
daemon_libhvddaemon_la_CFLAGS = $(AM_CFLAGS) $(ZMQ_CFLAGS) $(PROTOBUF_C_CFLAGS) $(SYSTEMD_CFLAGS) $(MHD_CFLAGS)
daemon_libhvddaemon_la_LIBADD = common/libhvdcommon.la $(SYSTEMD_LIBS) $(MHD_LIBS)

sbin_PROGRAMS += daemon/hvd-coordinatord
daemon_hvd_coordinatord_SOURCES = daemon/main.c
daemon_hvd_coordinatord_LDADD = daemon/libhvddaemon.la
