#!/bin/bash
# Session 20 run 3: FlashInfer's first half onto the GPU machine (device tool, carry .peers/a;
# .bundle and .peers/b do not fit one 64 MiB carry beside it). Run 4 follows at once.
mkdir -p /tmp/peers && cp .peers/a/* /tmp/peers/ && ls /tmp/peers
