#!/bin/bash
# test-collectives-np1.sh — test-collectives.sh on a job of 1 rank(s).
exec "$(dirname "$0")/test-collectives.sh" 1
