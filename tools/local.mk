# tools: hvdrun (launcher, with an embedded coordinator) and hvdctl (operator
# CLI), over an internal library of their parsers and formatters that the
# unit tests and the fuzzers link too. A program links what it uses of it:
# status_json.o (hvdctl's) needs jansson, hvdrun's modules nothing.
noinst_LTLIBRARIES += tools/libhvdtools.la
tools_libhvdtools_la_SOURCES = %D%/cpubind.c %D%/cpubind.h %D%/hostlist.c %D%/hostlist.h %D%/launcher.c %D%/launcher.h %D%/shellquote.c %D%/shellquote.h \
	%D%/elastic_driver.c %D%/elastic_driver.h \
	%D%/status_json.c %D%/status_json.h
tools_libhvdtools_la_CFLAGS = $(AM_CFLAGS) $(PROTOBUF_C_CFLAGS) $(JANSSON_CFLAGS)

bin_PROGRAMS += %D%/hvdrun %D%/hvdctl

%C%_hvdrun_SOURCES = %D%/hvdrun.c %D%/hvdrun.h %D%/hvdrun_options.c %D%/hvdrun_run.h %D%/hvdrun_env.c \
	%D%/hvdrun_daemons.c %D%/hvdrun_command.c %D%/hvdrun_workers.c %D%/hvdrun_elastic.c \
	%D%/hvdrun_remote.c %D%/hvdrun_warm.c
%C%_hvdrun_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/daemon
%C%_hvdrun_CFLAGS = $(AM_CFLAGS) $(ZMQ_CFLAGS) $(PROTOBUF_C_CFLAGS)
%C%_hvdrun_LDADD = tools/libhvdtools.la daemon/libhvddaemon.la -lm

%C%_hvdctl_SOURCES = %D%/hvdctl.c
%C%_hvdctl_CFLAGS = $(AM_CFLAGS) $(ZMQ_CFLAGS) $(PROTOBUF_C_CFLAGS) $(JANSSON_CFLAGS)
%C%_hvdctl_LDADD = tools/libhvdtools.la common/libhvdcommon.la $(JANSSON_LIBS)
