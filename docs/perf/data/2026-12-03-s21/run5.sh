#!/bin/bash
# Session 21 run 5: FlashInfer's first half (carry .peers/a), as run 2. Run 6 follows at once.
mkdir -p /tmp/peers && cp .peers/a/* /tmp/peers/ && ls /tmp/peers
