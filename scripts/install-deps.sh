#!/usr/bin/env bash
# Installs what tubelet needs to build and test on Debian 12 (run as root or with sudo).
#   oneDNN (GEMM), cJSON (config.json and safetensors headers), OpenMP (gcc's libgomp),
#   FFmpeg's libraries (video decoding; libavdevice for cameras in tubelet watch) and CLI (test
#   media), libzip and msgpack-c (official .pth/.pyth and Flax checkpoints), PCRE2 and utf8proc
#   (the CLIP tokenizer's Unicode classes, NFC and lowercase; docs/zero-shot.md), pkg-config;
#   clang + compiler-rt for the libFuzzer harness;
#   Python's venv module, headers, CMake and Ninja for the Python package (pyproject.toml, make test-python);
#   Open MPI for the data-parallel build (make MPI=1, make test-mpi);
#   GNU libmicrohttpd for tubelet serve (HTTP/1.1), curl for its tests, and Chromium to test its
#   page at / headless (tests/serve_page.sh).
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends \
    build-essential make pkg-config time \
    libdnnl-dev libcjson-dev libzip-dev libmsgpack-dev libpcre2-dev libutf8proc-dev \
    libavformat-dev libavcodec-dev libswscale-dev libavutil-dev libavdevice-dev ffmpeg \
    clang libclang-rt-14-dev \
    python3 python3-venv python3-dev cmake ninja-build \
    libopenmpi-dev openmpi-bin \
    libmicrohttpd-dev curl chromium
