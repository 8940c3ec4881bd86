#!/usr/bin/env bash
# Quick start: install mdindex in ./.venv, index examples/docs into the embedded
# Qdrant under ./.mdindex, and run a search.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet torch==2.13.0
python -m pip install --quiet -e .
export HF_HUB_OFFLINE=1
mdindex backfill examples/docs --state-dir .mdindex
mdindex search "how do I point mdindex at a Qdrant server?" -k 3 --state-dir .mdindex
