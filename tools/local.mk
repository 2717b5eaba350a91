# tools: hvdrun (launcher, with an embedded coordinator) and hvdctl (operator CLI).
bin_PROGRAMS += %D%/hvdrun %D%/hvdctl

%C%_hvdrun_SOURCES = %D%/hvdrun.c
%C%_hvdrun_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/daemon
%C%_hvdrun_CFLAGS = $(AM_CFLAGS) $(ZMQ_CFLAGS) $(PROTOBUF_C_CFLAGS)
%C%_hvdrun_LDADD = daemon/libhvddaemon.la -lm

%C%_hvdctl_SOURCES = %D%/hvdctl.c
%C%_hvdctl_CFLAGS = $(AM_CFLAGS) $(ZMQ_CFLAGS) $(PROTOBUF_C_CFLAGS)
%C%_hvdctl_LDADD = common/libhvdcommon.la
