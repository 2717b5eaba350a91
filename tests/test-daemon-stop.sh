#!/bin/bash
# test-daemon-stop.sh — test-daemon-lost.sh stop: SIGTERM to the daemon.
exec "$(dirname "$0")/test-daemon-lost.sh" stop
