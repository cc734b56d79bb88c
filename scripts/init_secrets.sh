#!/usr/bin/env bash
# Create the installation's secrets once, in one directory only the Airflow user can read:
#   fernet_key      encrypts connection passwords and variables in the metadata database
#   api_secret_key  signs api-server sessions and worker log requests ([api] secret_key)
#   jwt_secret      signs the tokens the api-server and workers exchange ([api_auth] jwt_secret)
#   passwords.json  the password of each UI user (the simple auth manager reads it; compose's init
#                   creates its FAB admin user with the first one)
# A value given in the environment wins over a generated one, and an existing file is never
# replaced, so restarting (or re-running init) keeps every encrypted value readable.
# Airflow reads the files through its *_CMD settings (e.g. AIRFLOW__CORE__FERNET_KEY_CMD), so no
# secret is ever written into airflow.cfg, the compose file or a log.
#
# usage: init_secrets.sh DIR [USER ...]     (users default to "admin"; the first user's password
#        is $BAKEOFF_ADMIN_PASSWORD when set, every other one is generated)
# FERNET_KEY_FILE, API_SECRET_KEY_FILE, JWT_SECRET_FILE and PASSWORDS_FILE put one file elsewhere
# than DIR, so that a deployment can give each service only the secrets it uses.
set -euo pipefail

dir=${1:?usage: init_secrets.sh DIR [USER ...]}
shift
users=("$@")
[ ${#users[@]} -gt 0 ] || users=(admin)
py=${PYTHON:-python3}

fernet_file=${FERNET_KEY_FILE:-$dir/fernet_key}
api_file=${API_SECRET_KEY_FILE:-$dir/api_secret_key}
jwt_file=${JWT_SECRET_FILE:-$dir/jwt_secret}
passwords_file=${PASSWORDS_FILE:-$dir/passwords.json}

umask 077
for f in "$fernet_file" "$api_file" "$jwt_file" "$passwords_file"; do mkdir -p "$(dirname "$f")"; done

# write_once FILE VALUE: create FILE with VALUE unless it exists (mode 0600)
write_once() {
  if [ ! -s "$1" ]; then
    printf '%s' "$2" > "$1.tmp" && mv "$1.tmp" "$1"
    echo "init_secrets: created $(basename "$1")"
  fi
}

random_hex() { "$py" -c 'import secrets; print(secrets.token_hex(32), end="")'; }

write_once "$fernet_file" "${FERNET_KEY:-$("$py" -c '
import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode(), end="")')}"
write_once "$api_file" "${API_SECRET_KEY:-$(random_hex)}"
write_once "$jwt_file" "${JWT_SECRET:-$(random_hex)}"

# passwords.json: {"user": "password"}; the first user's password may come from the environment.
PASSWORDS_FILE="$passwords_file" FIRST_PASSWORD="${BAKEOFF_ADMIN_PASSWORD:-}" "$py" - "${users[@]}" <<'PY'
import json, os, secrets, sys
path, users = os.environ["PASSWORDS_FILE"], sys.argv[1:]
current = json.load(open(path)) if os.path.exists(path) else {}
added = []
for i, user in enumerate(users):
    if user not in current:
        current[user] = (os.environ["FIRST_PASSWORD"] if i == 0 else "") or secrets.token_urlsafe(16)
        added.append(user)
if added:
    with open(path + ".tmp", "w") as f:
        json.dump(current, f)
    os.replace(path + ".tmp", path)
    print(f"init_secrets: passwords.json has a password for {', '.join(added)}")
PY
