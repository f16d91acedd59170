#!/bin/bash
# Session 23 run B: FlashInfer's first half (carry .peers/a). Run C follows at once.
mkdir -p /tmp/peers && cp .peers/a/* /tmp/peers/ && ls /tmp/peers
