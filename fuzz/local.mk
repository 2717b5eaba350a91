# Fuzzing: libFuzzer harnesses of everything that parses outside input
# (docs/FUZZING.md). Two builds of each harness:
#  - fuzz/regress-NAME (always, any compiler): runs the committed corpus
#    fuzz/corpus/NAME once; part of make check;
#  - fuzz/fuzz-NAME (configure --enable-fuzzing, clang): the libFuzzer
#    binary with ASan + UBSan, built by `make` and run by fuzz/run.sh.
# fuzz/gen_corpus writes the seed messages and checks the decoder's verdict
# on each (also a test).
%C%_harnesses = envelope negotiate conf hostfile dispatch statusjson slurm

EXTRA_DIST += %D%/run.sh %D%/fuzz.h $(foreach h,$(%C%_harnesses),%D%/$(h).c) %D%/corpus docs/FUZZING.md

%C%_cppflags = $(AM_CPPFLAGS) -I$(top_srcdir)/%D% -I$(top_srcdir)/daemon -I$(top_srcdir)/tools
%C%_cflags = $(AM_CFLAGS) $(ZMQ_CFLAGS) $(PROTOBUF_C_CFLAGS)

check_PROGRAMS += %D%/gen_corpus %D%/regress-envelope %D%/regress-negotiate %D%/regress-conf %D%/regress-hostfile \
	%D%/regress-dispatch %D%/regress-statusjson %D%/regress-slurm
TESTS += %D%/gen_corpus %D%/regress-envelope %D%/regress-negotiate %D%/regress-conf %D%/regress-hostfile \
	%D%/regress-dispatch %D%/regress-statusjson %D%/regress-slurm

%C%_gen_corpus_SOURCES = %D%/gen_corpus.c
%C%_gen_corpus_CPPFLAGS = $(%C%_cppflags)
%C%_gen_corpus_CFLAGS = $(%C%_cflags)
%C%_gen_corpus_LDADD = common/libhvdcommon.la

%C%_regress_envelope_SOURCES = %D%/envelope.c %D%/standalone.c %D%/fuzz.h
%C%_regress_envelope_CPPFLAGS = $(%C%_cppflags) -DFUZZ_NAME='"envelope"'
%C%_regress_envelope_CFLAGS = $(%C%_cflags)
%C%_regress_envelope_LDADD = common/libhvdcommon.la

%C%_regress_negotiate_SOURCES = %D%/negotiate.c %D%/standalone.c %D%/fuzz.h
%C%_regress_negotiate_CPPFLAGS = $(%C%_cppflags) -DFUZZ_NAME='"negotiate"'
%C%_regress_negotiate_CFLAGS = $(%C%_cflags)
%C%_regress_negotiate_LDADD = common/libhvdcommon.la

%C%_regress_conf_SOURCES = %D%/conf.c %D%/standalone.c %D%/fuzz.h
%C%_regress_conf_CPPFLAGS = $(%C%_cppflags) -DFUZZ_NAME='"conf"'
%C%_regress_conf_CFLAGS = $(%C%_cflags)
%C%_regress_conf_LDADD = common/libhvdcommon.la

%C%_regress_hostfile_SOURCES = %D%/hostfile.c %D%/standalone.c %D%/fuzz.h
%C%_regress_hostfile_CPPFLAGS = $(%C%_cppflags) -DFUZZ_NAME='"hostfile"'
%C%_regress_hostfile_CFLAGS = $(%C%_cflags)
%C%_regress_hostfile_LDADD = tools/libhvdtools.la -lm

%C%_regress_dispatch_SOURCES = %D%/dispatch.c %D%/standalone.c %D%/fuzz.h
%C%_regress_dispatch_CPPFLAGS = $(%C%_cppflags) -DFUZZ_NAME='"dispatch"'
%C%_regress_dispatch_CFLAGS = $(%C%_cflags)
%C%_regress_dispatch_LDADD = daemon/libhvddaemon.la -lm

%C%_regress_statusjson_SOURCES = %D%/statusjson.c %D%/standalone.c %D%/fuzz.h
%C%_regress_statusjson_CPPFLAGS = $(%C%_cppflags) -DFUZZ_NAME='"statusjson"'
%C%_regress_statusjson_CFLAGS = $(%C%_cflags) $(JANSSON_CFLAGS)
%C%_regress_statusjson_LDADD = tools/libhvdtools.la common/libhvdcommon.la $(JANSSON_LIBS)

%C%_regress_slurm_SOURCES = %D%/slurm.c %D%/standalone.c %D%/fuzz.h
%C%_regress_slurm_CPPFLAGS = $(%C%_cppflags) -DFUZZ_NAME='"slurm"'
%C%_regress_slurm_CFLAGS = $(%C%_cflags)
%C%_regress_slurm_LDADD = common/libhvdcommon.la

if ENABLE_FUZZING
# libFuzzer binaries: clang compiles the code under test once into
# instrumented objects (fuzz/obj/), and each harness links them (automake
# has no per-target compiler, so these are plain rules).
%C%_lib_srcs = $(filter %.c,$(common_libhvdcommon_la_SOURCES) $(daemon_libhvddaemon_la_SOURCES) $(tools_libhvdtools_la_SOURCES))
%C%_lib_objs = $(%C%_lib_srcs:%.c=%D%/obj/%.o) %D%/obj/proto/hvd.pb-c.o
%C%_clang_flags = -g -O1 -std=gnu11 $(WARN_CFLAGS) -pthread -fsanitize=address,undefined \
	-fno-sanitize-recover=undefined -fno-omit-frame-pointer \
	$(DEFS) -I$(top_builddir) $(%C%_cppflags) $(ZMQ_CFLAGS) $(PROTOBUF_C_CFLAGS) $(SYSTEMD_CFLAGS) $(MHD_CFLAGS) $(JANSSON_CFLAGS)
%C%_clang_libs = $(ZMQ_LIBS) $(PROTOBUF_C_LIBS) $(SYSTEMD_LIBS) $(MHD_LIBS) $(JANSSON_LIBS) -lm
%C%_fuzzers = $(foreach h,$(%C%_harnesses),%D%/fuzz-$(h))
noinst_DATA = $(%C%_fuzzers)
CLEANFILES += $(%C%_fuzzers) $(%C%_lib_objs)

%D%/obj/proto/hvd.pb-c.o: proto/hvd.pb-c.c proto/hvd.pb-c.h
	$(AM_V_CC)$(MKDIR_P) $(@D) && $(CLANG) $(%C%_clang_flags) -fsanitize=fuzzer-no-link -c -o $@ proto/hvd.pb-c.c
%D%/obj/%.o: $(top_srcdir)/%.c proto/hvd.pb-c.h
	$(AM_V_CC)$(MKDIR_P) $(@D) && $(CLANG) $(%C%_clang_flags) -fsanitize=fuzzer-no-link -c -o $@ $<
%D%/fuzz-%: $(top_srcdir)/%D%/%.c $(top_srcdir)/%D%/fuzz.h $(%C%_lib_objs)
	$(AM_V_CCLD)$(CLANG) $(%C%_clang_flags) -fsanitize=fuzzer -o $@ $< $(%C%_lib_objs) $(%C%_clang_libs)
endif

# make fuzz-long: every harness (or those in FUZZ_HARNESSES) for
# FUZZ_SECONDS each, starting from the committed corpus and growing the one
# kept in FUZZ_DIR; fails when a harness finds anything (docs/FUZZING.md,
# "Long run"). Run it before landing a change to a decoder or a handler.
FUZZ_SECONDS = 300
FUZZ_DIR = fuzz/long
FUZZ_HARNESSES = $(%C%_harnesses)
if ENABLE_FUZZING
.PHONY: fuzz-long
fuzz-long: $(%C%_fuzzers)
	$(top_srcdir)/fuzz/run.sh -t $(FUZZ_SECONDS) -o $(FUZZ_DIR) $(top_builddir) $(FUZZ_HARNESSES)
else
.PHONY: fuzz-long
fuzz-long:
	@echo "fuzz-long: this build has no fuzzers: configure it with --enable-fuzzing (needs clang)" >&2; exit 1
endif
