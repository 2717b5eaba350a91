#!/bin/bash
# test-collectives-np4.sh — test-collectives.sh on a job of 4 rank(s).
exec "$(dirname "$0")/test-collectives.sh" 4
