# tests/service.mk — hvd-coordinatord as a system service, without systemd as
# PID 1: the notify protocol (READY/STATUS/WATCHDOG/STOPPING) against a
# stand-in socket, SIGHUP reload, the unit files through systemd-analyze,
# the man pages against --help and the key table, and an installed tree.
TESTS += %D%/test-notify.sh %D%/test-reload.sh %D%/test-man.sh
EXTRA_DIST += %D%/test-notify.sh %D%/test-reload.sh %D%/test-man.sh \
	%D%/lib/notify_peer.py

