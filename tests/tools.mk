# tests/tools.mk — hvdrun and hvdctl, driven as a user would: real processes,
# real daemons on private runtime directories. test-hvdrun-multi.sh: several
# hosts on this machine (emulated, node daemons, ssh through a stand-in).
# test-hvdctl-job.sh: status, job, --endpoint, --watch and log-level against
# a live 3-rank job; test-hvdctl-multi.sh: peers and remote ranks of a job on
# two daemons; test-metrics.sh: hvdctl metrics and GET /metrics, parsed
# by a strict exposition-format parser (tests/lib/promparse.py).
# test-hvdrun-horovod-flags.sh: horovodrun's flags, taken, ignored or refused.
TESTS += %D%/test-hvdrun-horovod-flags.sh %D%/test-hvdrun.sh %D%/test-hvdrun-multi.sh %D%/test-hvdctl.sh %D%/test-hvdctl-job.sh %D%/test-hvdctl-multi.sh \
	%D%/test-metrics.sh
EXTRA_DIST += %D%/test-hvdrun-horovod-flags.sh %D%/test-hvdrun.sh %D%/test-hvdrun-multi.sh %D%/test-hvdctl.sh %D%/test-hvdctl-job.sh %D%/test-hvdctl-multi.sh \
	%D%/test-metrics.sh %D%/lib/promparse.py %D%/lib/http_bad.py
