#!/usr/bin/env bash
# Session 49: run A (tiny7-ref) continued to 360 updates (the learning rates are constant: --set updates continues it
# exactly). It overwrites $R/tiny7-ref (keep_every=120 keeps the 240-update weights as $R/tiny7-ref-at240); these
# 360-update weights ship as checkpoints/orl-tiny7-orl since session 50.
exec bash "$(dirname "$0")/../s50/run.sh" tiny7-ref --set updates=360   # the same command, one copy of it
