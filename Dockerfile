# bakeoff's Airflow image: the official Airflow 3.3.2 image (Python 3.11) plus the locked
# requirements (with the FAB auth manager) and the bakeoff library. Used by every service of
# docker-compose.yml that is not a stock image (the Airflow services and bakeoff-reaper).
FROM apache/airflow:3.3.2-python3.11

# The project's lock (make lock, from pyproject.toml), installed whole in pip's hash-checking mode:
# the image runs exactly the versions CI tested, every wheel checked against its hash. The lock pins
# apache-airflow itself, so pip cannot move the image's Airflow. It also holds the test and dev
# extras (a few tens of MB): one lock for every environment rather than a second one to keep in step.
COPY --chown=airflow:0 requirements.txt /opt/bakeoff/
RUN pip install --no-cache-dir --require-hashes -r /opt/bakeoff/requirements.txt

# The library (include/bakeoff) as an installed package; dags/, plugins/ and include/ are also
# mounted by docker-compose.yml so DAG and library edits need no rebuild.
COPY --chown=airflow:0 pyproject.toml /opt/bakeoff/
COPY --chown=airflow:0 include /opt/bakeoff/include
RUN pip install --no-cache-dir --no-deps /opt/bakeoff

# Init and settings-as-code: secret generation, connections/variables loading.
COPY --chown=airflow:0 scripts/init_secrets.sh scripts/load_settings.sh scripts/render_settings.py /opt/bakeoff/scripts/
COPY --chown=airflow:0 config /opt/bakeoff/config

# Mount points of named volumes: a new volume takes this ownership, so no service needs root.
# One directory per secret: docker-compose.yml mounts each only into the services that use it
# (tests/deploy checks that every named volume's mount point is here).
USER root
RUN mkdir -p /opt/airflow/secrets/fernet /opt/airflow/secrets/jwt /opt/airflow/secrets/api \
      /opt/airflow/secrets/admin /opt/airflow/secrets/reaper /opt/bakeoff-data \
 && chown -R airflow:0 /opt/airflow/secrets /opt/bakeoff-data \
 && chmod -R 0770 /opt/airflow/secrets && chmod 0775 /opt/bakeoff-data
USER airflow
