#!/usr/bin/env bash
# Load connections and variables from config/ into Airflow ("settings as code").
# Placeholders in the files are filled from the environment (see scripts/render_settings.py) into
# a private temporary directory that is deleted on exit, so no secret is ever written to the repo.
# The files are the source of truth: existing entries with the same names are overwritten.
#
# usage: scripts/load_settings.sh        (needs the `airflow` CLI configured for the target install)
# env:   BAKEOFF_SETTINGS_DIR  directory with connections.json (else connections.example.json),
#                              and variables.json; default: config/ next to this script
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=${BAKEOFF_SETTINGS_DIR:-$here/../config}
py=${PYTHON:-python}
connections=$dir/connections.json
[ -f "$connections" ] || connections=$dir/connections.example.json

umask 077
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$py" "$here/render_settings.py" "$connections" "$tmp/connections.json"
"$py" "$here/render_settings.py" "$dir/variables.json" "$tmp/variables.json"

airflow connections import --overwrite "$tmp/connections.json"
airflow variables import --action-on-existing-key overwrite "$tmp/variables.json"
