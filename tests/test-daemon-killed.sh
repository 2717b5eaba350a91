#!/bin/bash
# test-daemon-killed.sh — test-daemon-lost.sh kill: kill -9 of the daemon.
exec "$(dirname "$0")/test-daemon-lost.sh" kill
