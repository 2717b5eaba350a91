# tests/service.mk — hvd-coordinatord as a system service, without systemd as
# PID 1: the notify protocol (READY/STATUS/WATCHDOG/STOPPING) against a
# stand-in socket, SIGHUP reload, the unit files through systemd-analyze,
# the man pages against --help and the key table, an installed tree, and
# `pip install ./python-binding` against it.
TESTS += %D%/test-notify.sh %D%/test-reload.sh %D%/test-man.sh %D%/test-install.sh %D%/test-pip-install.sh
# the lock the two install tests take on the build tree, so that their
# installs do not run at once
CLEANFILES += .install.lock
EXTRA_DIST += %D%/test-notify.sh %D%/test-reload.sh %D%/test-man.sh %D%/test-install.sh %D%/test-pip-install.sh \
	%D%/lib/notify_peer.py

# the installation directories, fully expanded, for tests/test-install.sh
print-install-dirs:
	@echo "prefix='$(prefix)' bindir='$(bindir)' sbindir='$(sbindir)' libdir='$(libdir)'" \
		"includedir='$(includedir)' mandir='$(mandir)' sysconfdir='$(sysconfdir)'" \
		"systemdsystemunitdir='$(systemdsystemunitdir)' pyexecdir='$(pyexecdir)'" \
		"sysusersdir='$(sysusersdir)' tmpfilesdir='$(tmpfilesdir)' python='$(HAVE_PYTHON_TRUE)yes'"
