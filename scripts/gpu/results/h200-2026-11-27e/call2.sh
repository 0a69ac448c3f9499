#!/bin/bash
# Session 19's second device call (carry: .gpu and config.h): libcoop.so
# compiled on the device, then every measurement of device_run.sh on the code
# session 18 changed.
mkdir -p /tmp/b && (timeout 150 bash scripts/gpu/build_on_device.sh > /tmp/b/build_on_device.log 2>&1; echo "build_on_device rc=$?" >> /tmp/b/build_on_device.log); tail -25 /tmp/b/build_on_device.log | cut -c1-400; cp /tmp/b/build_on_device.log $OUT/; timeout 330 bash scripts/gpu/device_run.sh
