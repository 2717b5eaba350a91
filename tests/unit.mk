# Check unit tests of the internal library (common/): fusion planner,
# the autotuner's search,
# negotiation table, wire format, configuration, string map; of libhvd's
# modules compiled in: the fast path's readiness board (client/fastpath.c),
# the data plane's barrier and its spin gate (client/cpu_backend.c),
# the count of waits that opens the gate (client/handle.c),
# the autotuner's step meter (client/tune_meter.c), the choice of slot
# writes (client/slot_mode.c), the pool of outputs it keeps for reuse
# (client/outbuf.c) and a worker's settings
# (client/settings.c); of the daemon's message handlers (check_daemon);
# and of the tools' library (tools/): hvdrun's host lists and shell
# quoting, hvdctl's JSON.
if HAVE_CHECK
%C%_unit_tests = \
	%D%/check_fusion \
	%D%/check_autotune \
	%D%/check_negotiate \
	%D%/check_wire \
	%D%/check_conf \
	%D%/check_strmap \
	%D%/check_fastpath \
	%D%/check_tune_meter \
	%D%/check_slot_mode \
	%D%/check_spin_gate \
	%D%/check_handle_wait \
	%D%/check_outbuf \
	%D%/check_settings \
	%D%/check_daemon \
	%D%/check_hostlist \
	%D%/check_launcher \
	%D%/check_slurm_hostlist \
	%D%/check_shellquote \
	%D%/check_status_json
check_PROGRAMS += $(%C%_unit_tests)
TESTS += $(%C%_unit_tests)

%C%_unit_cflags = $(AM_CFLAGS) $(CHECK_CFLAGS) $(ZMQ_CFLAGS) $(PROTOBUF_C_CFLAGS)
%C%_unit_ldadd = common/libhvdcommon.la $(CHECK_LIBS) $(ZMQ_LIBS) $(PROTOBUF_C_LIBS)

%C%_check_fastpath_SOURCES = %D%/check_fastpath.c client/fastpath.c client/fastpath.h
%C%_check_fastpath_CPPFLAGS = $(CLIENT_INTERNAL_CPPFLAGS)
%C%_check_fastpath_CFLAGS = $(%C%_unit_cflags)
%C%_check_fastpath_LDADD = $(%C%_unit_ldadd)

%C%_check_slot_mode_SOURCES = %D%/check_slot_mode.c client/slot_mode.c client/cpu_internal.h
%C%_check_slot_mode_CPPFLAGS = $(CLIENT_INTERNAL_CPPFLAGS)
%C%_check_slot_mode_CFLAGS = $(%C%_unit_cflags)
%C%_check_slot_mode_LDADD = $(%C%_unit_ldadd)

# the data plane's barrier and its spin gate: the one-node backend alone
%C%_check_spin_gate_SOURCES = %D%/check_spin_gate.c client/cpu_backend.c client/cpu_stream.c client/cpu_multi.c \
	client/cpu_gather.c client/cpu_rsring.c client/cpu_set.c client/backend.h client/fastpath.c \
	client/fastpath.h client/tcp.c client/tcp.h client/shared_arena.c client/shared_arena.h \
	client/zero_copy.c client/slot_mode.c client/cpu_internal.h
%C%_check_spin_gate_CPPFLAGS = $(CLIENT_INTERNAL_CPPFLAGS)
%C%_check_spin_gate_CFLAGS = $(%C%_unit_cflags)
%C%_check_spin_gate_LDADD = $(%C%_unit_ldadd) -lrt

# the spin gate's count of the application's waits: handles alone
%C%_check_handle_wait_SOURCES = %D%/check_handle_wait.c client/handle.c client/client.h
%C%_check_handle_wait_CPPFLAGS = $(CLIENT_INTERNAL_CPPFLAGS)
%C%_check_handle_wait_CFLAGS = $(%C%_unit_cflags)
%C%_check_handle_wait_LDADD = $(%C%_unit_ldadd)

%C%_check_outbuf_SOURCES = %D%/check_outbuf.c client/outbuf.c
%C%_check_outbuf_CPPFLAGS = $(CLIENT_INTERNAL_CPPFLAGS)
%C%_check_outbuf_CFLAGS = $(%C%_unit_cflags)
%C%_check_outbuf_LDADD = $(%C%_unit_ldadd)

%C%_check_tune_meter_SOURCES = %D%/check_tune_meter.c client/tune_meter.c client/tune_meter.h
%C%_check_tune_meter_CPPFLAGS = $(CLIENT_INTERNAL_CPPFLAGS)
%C%_check_tune_meter_CFLAGS = $(%C%_unit_cflags)
%C%_check_tune_meter_LDADD = $(%C%_unit_ldadd)

# the daemon's handlers, fed without sockets (daemon/coordinator.h)
%C%_check_daemon_SOURCES = %D%/check_daemon.c
%C%_check_daemon_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/daemon
%C%_check_daemon_CFLAGS = $(%C%_unit_cflags)
%C%_check_daemon_LDADD = daemon/libhvddaemon.la $(%C%_unit_ldadd)

%C%_check_settings_SOURCES = %D%/check_settings.c client/settings.c client/settings.h \
	client/launcher_env.c client/launcher_env.h
%C%_check_settings_CPPFLAGS = $(CLIENT_INTERNAL_CPPFLAGS)
%C%_check_settings_CFLAGS = $(%C%_unit_cflags)
%C%_check_settings_LDADD = $(%C%_unit_ldadd)

%C%_check_fusion_SOURCES = %D%/check_fusion.c
%C%_check_fusion_CFLAGS = $(%C%_unit_cflags)
%C%_check_fusion_LDADD = $(%C%_unit_ldadd)

%C%_check_autotune_SOURCES = %D%/check_autotune.c
%C%_check_autotune_CFLAGS = $(%C%_unit_cflags)
%C%_check_autotune_LDADD = $(%C%_unit_ldadd) -lm

%C%_check_negotiate_SOURCES = %D%/check_negotiate.c
%C%_check_negotiate_CFLAGS = $(%C%_unit_cflags)
%C%_check_negotiate_LDADD = $(%C%_unit_ldadd)

%C%_check_wire_SOURCES = %D%/check_wire.c
%C%_check_wire_CFLAGS = $(%C%_unit_cflags)
%C%_check_wire_LDADD = $(%C%_unit_ldadd)

%C%_check_conf_SOURCES = %D%/check_conf.c
%C%_check_conf_CFLAGS = $(%C%_unit_cflags)
%C%_check_conf_LDADD = $(%C%_unit_ldadd)

%C%_check_strmap_SOURCES = %D%/check_strmap.c
%C%_check_strmap_CFLAGS = $(%C%_unit_cflags)
%C%_check_strmap_LDADD = $(%C%_unit_ldadd)

%C%_check_hostlist_SOURCES = %D%/check_hostlist.c
%C%_check_hostlist_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
%C%_check_hostlist_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
%C%_check_hostlist_LDADD = tools/libhvdtools.la $(CHECK_LIBS)

%C%_check_launcher_SOURCES = %D%/check_launcher.c
%C%_check_launcher_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
%C%_check_launcher_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
%C%_check_launcher_LDADD = tools/libhvdtools.la common/libhvdcommon.la $(CHECK_LIBS)

%C%_check_slurm_hostlist_SOURCES = %D%/check_slurm_hostlist.c
%C%_check_slurm_hostlist_CFLAGS = $(%C%_unit_cflags)
%C%_check_slurm_hostlist_LDADD = $(%C%_unit_ldadd)

%C%_check_shellquote_SOURCES = %D%/check_shellquote.c
%C%_check_shellquote_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
%C%_check_shellquote_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
%C%_check_shellquote_LDADD = tools/libhvdtools.la $(CHECK_LIBS)

%C%_check_status_json_SOURCES = %D%/check_status_json.c
%C%_check_status_json_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
%C%_check_status_json_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(PROTOBUF_C_CFLAGS) $(JANSSON_CFLAGS)
%C%_check_status_json_LDADD = tools/libhvdtools.la common/libhvdcommon.la $(CHECK_LIBS) $(JANSSON_LIBS) \
	$(PROTOBUF_C_LIBS) -lm

# libhvd's completion callbacks (hvd_handle_notify), on a job of one rank
check_PROGRAMS += %D%/check_notify
TESTS += %D%/check_notify
%C%_check_notify_SOURCES = %D%/check_notify.c
%C%_check_notify_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
%C%_check_notify_LDADD = client/libhvd.la $(CHECK_LIBS)

endif
