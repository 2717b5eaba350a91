# systemd units, generated at make time (configure would leave a literal
# ${exec_prefix} in ExecStart=), the sysusers/tmpfiles snippets and the
# example configuration.
systemdsystemunit_DATA = %D%/hvd-coordinatord.service
sysusersdir = $(prefix)/lib/sysusers.d
tmpfilesdir = $(prefix)/lib/tmpfiles.d
hvdconfdir = $(sysconfdir)/hvd
EXTRA_DIST += %D%/coordinatord.conf

# The example always goes to coordinatord.conf.example; coordinatord.conf
# itself only when there is none, so a reinstall keeps the admin's file.
install-data-hook: install-systemd-snippets
install-systemd-snippets:
	$(MKDIR_P) $(DESTDIR)$(sysusersdir) $(DESTDIR)$(tmpfilesdir) $(DESTDIR)$(hvdconfdir)
	$(INSTALL_DATA) $(srcdir)/%D%/hvd.sysusers $(DESTDIR)$(sysusersdir)/hvd.conf
	$(INSTALL_DATA) $(srcdir)/%D%/hvd.tmpfiles $(DESTDIR)$(tmpfilesdir)/hvd.conf
	$(INSTALL_DATA) $(srcdir)/%D%/coordinatord.conf $(DESTDIR)$(hvdconfdir)/coordinatord.conf.example
	test -e $(DESTDIR)$(hvdconfdir)/coordinatord.conf || \
		$(INSTALL_DATA) $(srcdir)/%D%/coordinatord.conf $(DESTDIR)$(hvdconfdir)/coordinatord.conf
uninstall-hook: uninstall-systemd-snippets
uninstall-systemd-snippets:
	rm -f $(DESTDIR)$(sysusersdir)/hvd.conf $(DESTDIR)$(tmpfilesdir)/hvd.conf
	if cmp -s $(srcdir)/%D%/coordinatord.conf $(DESTDIR)$(hvdconfdir)/coordinatord.conf; then \
		rm -f $(DESTDIR)$(hvdconfdir)/coordinatord.conf; fi
	rm -f $(DESTDIR)$(hvdconfdir)/coordinatord.conf.example
	-rmdir $(DESTDIR)$(hvdconfdir) 2>/dev/null

%D%/hvd-coordinatord.service: %D%/hvd-coordinatord.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && sed -e 's|@sbindir[@]|$(sbindir)|g' -e 's|@sysconfdir[@]|$(sysconfdir)|g' \
		$(srcdir)/%D%/hvd-coordinatord.service.in >$@
CLEANFILES += %D%/hvd-coordinatord.service
EXTRA_DIST += %D%/hvd-coordinatord.service.in %D%/hvd.sysusers %D%/hvd.tmpfiles
