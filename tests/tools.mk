# tests/tools.mk — hvdrun and hvdctl, driven as a user would: real processes,
# real daemons on private runtime directories. test-hvdrun-multi.sh: several
# hosts on this machine (emulated, node daemons, ssh through a stand-in).
TESTS += %D%/test-hvdrun.sh %D%/test-hvdrun-multi.sh %D%/test-hvdctl.sh
EXTRA_DIST += %D%/test-hvdrun.sh %D%/test-hvdrun-multi.sh %D%/test-hvdctl.sh
