# tests/tools.mk — hvdrun and hvdctl, driven as a user would: real processes,
# real daemons on private runtime directories.
TESTS += %D%/test-hvdrun.sh %D%/test-hvdctl.sh
EXTRA_DIST += %D%/test-hvdrun.sh %D%/test-hvdctl.sh
