"""docker-compose.yml against the Compose specification's JSON schema, and its safe defaults.

No Docker engine is needed: the file is validated as written and after interpolation with the
values from .env.example, which is what `docker compose config` would check first.
"""

from __future__ import annotations

import copy
import json
import re
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml
from compose_interpolation import InterpolationError, interpolate, read_env_file, variables_used
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
COMPOSE_TEXT = (ROOT / "docker-compose.yml").read_text()
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
LOCK_TEXT = (ROOT / "requirements.txt").read_text()
ENV_EXAMPLE = read_env_file((ROOT / ".env.example").read_text())
AIRFLOW_SERVICES = {
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker",
    "airflow-init",
}
ONE_SHOT = {"airflow-init", "minio-init", "airflow-cli"}
# the container is the reaper loop: nothing to probe, `restart: unless-stopped` restarts it if it exits
NOTHING_TO_PROBE = {"bakeoff-reaper"}
SECRETS_DIR = "/opt/airflow/secrets/"
# the secrets each service uses (why: the comment at the top of docker-compose.yml); no other service mounts one
SECRET_NEEDS = {
    "airflow-apiserver": {"fernet", "jwt", "api"},
    "airflow-scheduler": {"fernet", "jwt"},
    "airflow-dag-processor": {"fernet"},
    "airflow-triggerer": {"fernet", "api"},
    "airflow-worker": {"api"},
    "airflow-cli": {"fernet"},
    "airflow-init": {"fernet", "jwt", "api", "admin", "reaper"},
    "bakeoff-reaper": {"reaper"},
}
# the *_CMD setting through which Airflow reads each secret
SECRET_SETTING = {
    "fernet": "AIRFLOW__CORE__FERNET_KEY_CMD",
    "jwt": "AIRFLOW__API_AUTH__JWT_SECRET_CMD",
    "api": "AIRFLOW__API__SECRET_KEY_CMD",
}


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads((HERE / "compose-spec.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.fixture(scope="module")
def raw() -> dict:
    return yaml.safe_load(COMPOSE_TEXT)


@pytest.fixture(scope="module")
def compose(raw) -> dict:
    """The file as Compose sees it with .env.example's values (anchors already merged by YAML)."""
    return interpolate(raw, ENV_EXAMPLE)


def _errors(validator, doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_compose_file_matches_the_compose_specification(validator, raw, compose):
    assert _errors(validator, raw) == []
    assert _errors(validator, compose) == []


@pytest.mark.parametrize(
    "breakage",
    [
        lambda c: c["services"]["airflow-worker"].__setitem__("healthcheck", {"test": ["CMD"], "intervall": "5s"}),
        lambda c: c["services"]["redis"].__setitem__("ports", {"6379": 6379}),
        lambda c: c.__setitem__("servics", {}),
        lambda c: c["services"]["postgres"].__setitem__("depends_on", {"redis": {"condition": "healthy"}}),
    ],
)
def test_the_schema_check_catches_a_broken_file(validator, compose, breakage):
    broken = copy.deepcopy(compose)
    breakage(broken)
    assert _errors(validator, broken)


def test_the_services_of_airflows_celery_layout_are_all_there(compose):
    services = set(compose["services"])
    assert {"postgres", "redis", "minio", "minio-init", *AIRFLOW_SERVICES} <= services
    common = compose["x-airflow-common"]["environment"]
    assert common["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert compose["x-metadata-db"]["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://airflow:")
    assert common["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://:")
    assert common["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("redis://:")
    assert compose["services"]["airflow-worker"]["command"] == "celery worker"


def test_only_the_api_server_publishes_a_port_and_on_loopback_by_default(compose):
    published = {name: s["ports"] for name, s in compose["services"].items() if s.get("ports")}
    assert list(published) == ["airflow-apiserver"]
    assert published["airflow-apiserver"] == ["127.0.0.1:8080:8080"]


def test_the_worker_can_be_scaled(compose):
    worker = compose["services"]["airflow-worker"]
    assert "container_name" not in worker and "ports" not in worker and "hostname" not in worker


def test_the_image_is_built_once_and_every_other_service_uses_it_by_tag(compose):
    """`up --build` builds one image, not one per service (dangling copies, every service recreated);
    the services that run it name the tag and never pull it (nothing to pull: it is built here)."""
    services = compose["services"]
    builders = [name for name, s in services.items() if "build" in s]
    assert builders == ["airflow-init"]
    tag = services["airflow-init"]["image"]
    users = sorted(name for name, s in services.items() if s.get("image") == tag and name != "airflow-init")
    assert set(AIRFLOW_SERVICES) - {"airflow-init"} <= set(users)
    assert {"bakeoff-clients", "bakeoff-reaper"} <= set(users)
    assert {name: services[name].get("pull_policy") for name in users} == dict.fromkeys(users, "never")


def test_scaling_the_workers_is_documented_as_touching_only_the_workers():
    """`--no-deps ... airflow-worker` leaves airflow-init (a one-shot) and the other services alone."""
    assert "docker compose up -d --no-deps --scale airflow-worker=3 airflow-worker" in COMPOSE_TEXT
    assert "up -d --scale airflow-worker" not in COMPOSE_TEXT


def test_a_volume_subpath_mount_comes_with_the_engine_version_it_needs(compose):
    """Docker Engine before 26 ignores a volume's `subpath` silently and mounts the volume's root:
    bakeoff-clients then finds no installation secret under its read-only mount and every fleet
    member fails. The documented requirement must say so wherever the file mounts a subpath."""
    subpaths = [
        name
        for name, service in compose["services"].items()
        for mount in service.get("volumes", [])
        if isinstance(mount, dict) and (mount.get("volume") or {}).get("subpath")
    ]
    assert subpaths == ["bakeoff-clients"]
    production = (ROOT / "docs" / "production.md").read_text()
    assert "Needs Docker Engine 26 or later" in production


def test_workers_serve_emulated_nodes_on_their_compose_address(compose):
    env = compose["services"]["airflow-worker"]["environment"]
    assert env["BAKEOFF_NODE_ADDRESS"] == "@hostname"


def test_every_long_running_service_has_a_healthcheck(compose):
    for name, service in compose["services"].items():
        if name not in ONE_SHOT | NOTHING_TO_PROBE:
            assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_airflow_services_mount_dags_plugins_and_include_and_wait_for_init(compose):
    for name in AIRFLOW_SERVICES:
        service = compose["services"][name]
        targets = {v.split(":")[1] for v in service["volumes"]}
        assert {"/opt/airflow/dags", "/opt/airflow/plugins", "/opt/airflow/include"} <= targets, name
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy", name
        if name != "airflow-init":
            assert service["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"


def test_authentication_is_the_fab_auth_manager_with_an_admin_created_by_init(compose):
    env = compose["x-airflow-common"]["environment"]
    assert env["AIRFLOW__CORE__AUTH_MANAGER"] == "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
    assert "SIMPLE_AUTH_MANAGER" not in COMPOSE_TEXT
    script = compose["services"]["airflow-init"]["command"][1]
    assert "init_secrets.sh /opt/airflow/secrets/admin" in script
    assert script.index("airflow db migrate") < script.index("airflow users create --role Admin")
    assert '--password="${password}"' in script and "echo" not in script.split("airflow users create")[0]
    assert "apache-airflow-providers-fab" in {Requirement(r).name for r in PROJECT["dependencies"]}
    assert re.search(r"^apache-airflow-providers-fab==\S+ \\$", LOCK_TEXT, re.M)


SECRET_FILE = {"fernet": "fernet_key", "jwt": "jwt_secret", "api": "api_secret_key"}


def _secret_mounts(service: dict) -> dict[str, str]:
    """secret name -> volume entry, for each volume the service mounts under SECRETS_DIR ("all": the whole dir)."""
    out = {}
    for v in service.get("volumes", []):
        if isinstance(v, dict):  # long syntax: a subpath of a data volume (bakeoff-clients' installation secret)
            v = f"{v['source']}:{v['target']}" + (":ro" if v.get("read_only") else "")
        target = v.split(":")[1].rstrip("/") + "/"
        if target.startswith(SECRETS_DIR):
            out[target.removeprefix(SECRETS_DIR).split("/")[0] or "all"] = v
    return out


def _secret_violations(compose: dict) -> list[str]:
    bad = []
    for name, service in compose["services"].items():
        mounts = _secret_mounts(service)
        if set(mounts) != SECRET_NEEDS.get(name, set()):
            bad.append(f"{name} mounts secrets {sorted(mounts)}, needs {sorted(SECRET_NEEDS.get(name, set()))}")
        env = service.get("environment") or {}
        for secret, setting in SECRET_SETTING.items():
            if secret in mounts and env.get(setting) != f"cat {SECRETS_DIR}{secret}/{SECRET_FILE[secret]}":
                bad.append(f"{name}: {setting} does not read the mounted {secret} secret")
            if secret not in mounts and setting in env:  # a *_CMD without its file fails every read of it
                bad.append(f"{name} reads {setting} without mounting the {secret} secret")
        bad += [
            f"{name} can write the {secret} secret"
            for secret, volume in mounts.items()
            if name != "airflow-init" and not volume.endswith(":ro")
        ]
    return bad


def test_each_service_mounts_only_the_secrets_it_needs(compose):
    """Task code (workers), the reaper and the stock images cannot read a secret their service has no use for."""
    assert _secret_violations(compose) == []
    assert not _secret_mounts(compose["x-airflow-common"])


@pytest.mark.parametrize(
    "breakage",
    [
        lambda c: c["services"]["airflow-worker"]["volumes"].append(
            "airflow-fernet-key:/opt/airflow/secrets/fernet:ro"
        ),
        lambda c: c["services"]["bakeoff-reaper"]["volumes"].append("airflow-jwt-secret:/opt/airflow/secrets/jwt:ro"),
        lambda c: (
            c["services"]["minio"].setdefault("volumes", []).append("airflow-admin-password:/opt/airflow/secrets/admin")
        ),
        lambda c: c["services"]["airflow-triggerer"]["volumes"].append("secrets:/opt/airflow/secrets"),
        lambda c: c["services"]["airflow-worker"]["environment"].__setitem__(
            "AIRFLOW__CORE__FERNET_KEY_CMD", "cat /opt/airflow/secrets/fernet/fernet_key"
        ),
        lambda c: c["services"]["airflow-scheduler"]["volumes"].__setitem__(
            -1, c["services"]["airflow-scheduler"]["volumes"][-1].removesuffix(":ro")
        ),
    ],
)
def test_the_secret_check_catches_a_service_with_a_secret_it_does_not_need(compose, breakage):
    broken = copy.deepcopy(compose)
    breakage(broken)
    assert _secret_violations(broken)


def test_init_writes_each_secret_into_the_volume_its_services_mount(compose):
    init = compose["services"]["airflow-init"]
    env, mounts = init["environment"], _secret_mounts(init)
    files = {
        "fernet": "FERNET_KEY_FILE",
        "jwt": "JWT_SECRET_FILE",
        "api": "API_SECRET_KEY_FILE",
        "admin": "PASSWORDS_FILE",
        "reaper": "REAPER_PASSWORD_FILE",
    }
    for secret, variable in files.items():
        assert env[variable].startswith(f"{SECRETS_DIR}{secret}/"), variable
        volume = mounts[secret].split(":")[0]
        users = {
            n
            for n, s in compose["services"].items()
            if volume in {v["source"] if isinstance(v, dict) else v.split(":")[0] for v in s.get("volumes", [])}
        }
        assert users == {n for n, needs in SECRET_NEEDS.items() if secret in needs}, (secret, users)


def test_the_reaper_runs_without_airflow_and_holds_cloud_credentials_only(compose):
    """Its Airflow access is a Viewer user asking the REST API for run states: no Airflow secret,
    no database, no data volume."""
    from bakeoff import airflow_api
    from bakeoff.core.provider_facts import PROVIDERS

    reaper = compose["services"]["bakeoff-reaper"]
    assert reaper["command"] == ["python", "-m", "bakeoff", "reap", "--loop", "--interval-s", "300"]
    assert reaper["restart"] == "unless-stopped" and "depends_on" not in reaper and "ports" not in reaper
    assert "/entrypoint" not in reaper["entrypoint"]  # Airflow's entrypoint waits for the database
    # each cloud's credentials as the registry names their variables (``env``), its API base left at its default
    keys = {v for p in PROVIDERS.values() for field, v in p.env.items() if field != "base_url"}
    cloud = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", *keys}
    api = {airflow_api.URL_ENV, airflow_api.USER_ENV, airflow_api.PASSWORD_FILE_ENV}
    assert set(reaper["environment"]) == cloud | api | {"PYTHONPATH", "BAKEOFF_INSTALLATION_ID"}
    assert reaper["volumes"] == [
        "./include:/opt/airflow/include:ro",
        "bakeoff-reaper-password:/opt/airflow/secrets/reaper:ro",
    ]
    env = reaper["environment"]
    assert env[airflow_api.URL_ENV] == "http://airflow-apiserver:8080"
    init = compose["services"]["airflow-init"]
    assert env[airflow_api.PASSWORD_FILE_ENV] == init["environment"]["REAPER_PASSWORD_FILE"]
    script = init["command"][1]
    created = re.search(r"airflow users create --role Viewer --username (\S+) --password=(.+?) \\", script)
    assert created and created.groups() == (env[airflow_api.USER_ENV], '"$(cat "${REAPER_PASSWORD_FILE}")"')
    raw_reaper = yaml.safe_load(COMPOSE_TEXT)["services"]["bakeoff-reaper"]
    assert not re.search(r"POSTGRES|REDIS|MINIO|AIRFLOW__|SECRET_KEY|FERNET|JWT", json.dumps(raw_reaper))


def test_results_and_reports_live_in_the_minio_bucket_through_the_bakeoff_s3_connection(compose):
    """Workers share a run through object storage: both stores are s3:// URLs on the bucket minio-init
    creates, through an aws connection to MinIO; no service keeps them on a local path."""
    env = compose["x-airflow-common"]["environment"]
    bucket = compose["services"]["minio-init"]["environment"]["BUCKET"]
    assert env["BAKEOFF_RESULTS"] == f"s3://bakeoff_s3@{bucket}/results"
    assert env["BAKEOFF_REPORTS"] == f"s3://bakeoff_s3@{bucket}/reports"
    for name, service in compose["services"].items():
        for var in ("BAKEOFF_RESULTS", "BAKEOFF_REPORTS"):
            assert (service.get("environment") or {}).get(var, env[var]).startswith("s3://"), (name, var)
    conn = json.loads((ROOT / "config" / "connections.example.json").read_text())["bakeoff_s3"]
    assert conn["conn_type"] == "aws" and "endpoint_url" in conn["extra"]
    init = compose["services"]["airflow-init"]["environment"]
    assert init["BAKEOFF_S3_ENDPOINT_URL"] == "http://minio:9000"
    worker = compose["services"]["airflow-worker"]
    assert worker["depends_on"]["minio-init"]["condition"] == "service_completed_successfully"


def test_required_passwords_have_no_default():
    with pytest.raises(InterpolationError, match="POSTGRES_PASSWORD"):
        interpolate(yaml.safe_load(COMPOSE_TEXT), {k: v for k, v in ENV_EXAMPLE.items() if k != "POSTGRES_PASSWORD"})


def test_every_variable_the_compose_file_reads_is_documented_in_env_example():
    undocumented = variables_used(COMPOSE_TEXT) - set(ENV_EXAMPLE)
    assert undocumented == set()


def test_env_example_holds_placeholders_only():
    text = (ROOT / ".env.example").read_text()
    assert re.search(r"placeholder", text, re.I)
    for key, value in ENV_EXAMPLE.items():
        if re.search(r"PASSWORD|SECRET|TOKEN|API_KEY|ACCESS_KEY", key):
            assert value == "" or value.startswith("change-me"), f"{key} looks like a real secret"


def test_dockerfile_builds_on_the_pinned_airflow_and_installs_the_library():
    dockerfile = (ROOT / "Dockerfile").read_text()
    base = re.search(r"^FROM (\S+)", dockerfile, re.M).group(1)
    pinned = re.search(r"^apache-airflow==(\S+) \\$", LOCK_TEXT, re.M).group(1)
    assert base == f"apache/airflow:{pinned}-python3.11"
    assert "apache-airflow==" + pinned in PROJECT["dependencies"]
    assert "pip install --no-cache-dir --require-hashes -r /opt/bakeoff/requirements.txt" in dockerfile
    assert re.search(r"pip install .*/opt/bakeoff$", dockerfile, re.M)
    for src in re.findall(r"^COPY (?:--\S+ )*(.+) \S+$", dockerfile, re.M):
        for path in src.split():
            assert (ROOT / path).exists(), f"Dockerfile copies missing {path}"
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".env", ".venv", ".git"} <= set(ignored)


# the base image's own directories that a named volume mounts over (owned by airflow there)
BASE_IMAGE_DIRS = {"/opt/airflow/logs"}


def _dockerfile_dirs(dockerfile: str) -> tuple[set[str], set[str]]:
    """What the Dockerfile's RUN lines create (``mkdir -p``) and hand to airflow (``chown -R airflow:0``)."""
    made: set[str] = set()
    owned: set[str] = set()
    for run in re.findall(r"^RUN (.*?)(?<!\\)$", dockerfile.replace("\\\n", " "), re.M | re.S):
        for step in re.split(r"&&|;", run):
            words = step.split()
            if words[:2] == ["mkdir", "-p"]:
                made.update(words[2:])
            elif words[:3] == ["chown", "-R", "airflow:0"]:
                owned.update(words[3:])
    return made, owned


def _mount_point_faults(compose: dict, dockerfile: str) -> list[str]:
    made, owned = _dockerfile_dirs(dockerfile)
    faults = []
    built = {s["image"] for s in compose["services"].values() if s.get("build") == "."}
    for name, service in compose["services"].items():
        if service.get("image") not in built:  # only the services that run the image built here
            continue
        for mount in service.get("volumes", []):
            if isinstance(mount, dict):  # long syntax, read-only subpath: nothing is written through it
                continue
            volume, target = mount.split(":")[:2]
            if volume not in compose["volumes"] or target in BASE_IMAGE_DIRS:
                continue  # a bind mount, or a directory the base image gives airflow
            if target not in made or not any(target == d or target.startswith(d + "/") for d in owned):
                faults.append(f"{name}: {volume} -> {target}")
    return faults


def test_every_named_volume_mounts_on_a_directory_the_image_gives_airflow(compose):
    """A new volume copies its mount point's owner and mode; one the image lacks comes up root's
    (0755), and init, running as uid 50000, cannot write its secret there."""
    assert _mount_point_faults(compose, (ROOT / "Dockerfile").read_text()) == []


def test_the_mount_point_check_catches_a_missing_directory(compose):
    dockerfile = (ROOT / "Dockerfile").read_text().replace(" /opt/airflow/secrets/reaper", "")
    assert _mount_point_faults(compose, dockerfile) == [
        "airflow-init: bakeoff-reaper-password -> /opt/airflow/secrets/reaper",
        "bakeoff-reaper: bakeoff-reaper-password -> /opt/airflow/secrets/reaper",
    ]
