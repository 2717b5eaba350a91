#!/bin/bash
# test-collectives-np2.sh — test-collectives.sh on a job of 2 rank(s).
exec "$(dirname "$0")/test-collectives.sh" 2
