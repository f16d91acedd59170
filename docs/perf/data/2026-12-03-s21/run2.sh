#!/bin/bash
# Session 21 run 2: FlashInfer's first half onto the GPU machine (carry .peers/a; .bundle and
# .peers/b do not fit one 64 MiB carry beside it). Run 3 follows at once.
mkdir -p /tmp/peers && cp .peers/a/* /tmp/peers/ && ls /tmp/peers
