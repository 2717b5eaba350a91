#!/bin/bash
# test-collectives-np3.sh — test-collectives.sh on a job of 3 rank(s).
exec "$(dirname "$0")/test-collectives.sh" 3
