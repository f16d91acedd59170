#!/bin/bash
# Session 27 run 1 (carry .peers/a): part one of the peers' runtime onto the machine.
mkdir -p /tmp/peers && cp .peers/a/* /tmp/peers/ && nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
