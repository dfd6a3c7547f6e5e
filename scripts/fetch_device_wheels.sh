#!/usr/bin/env bash
# Download (on a machine with a package registry) the wheels listed in
# scripts/device_wheels.txt for a Python 3.12 x86-64 Linux GPU machine, into .whl/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
grep -v '^#' scripts/device_wheels.txt | grep . | while read -r req; do
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
        --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 -d .whl "$req"
done
ls .whl | wc -l
