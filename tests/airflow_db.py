"""One migrated Airflow metadata database per test session, copied by every test that needs one.

`airflow db migrate` on a fresh SQLite file takes half a minute to a minute on two loaded cores; the
tests that build an Airflow (create_app, an api-server, the approval runners) each used to pay it.
The template carries Airflow's tables and FAB's (migrated with the FAB auth manager configured), so
a copy serves either auth manager: the simple one ignores FAB's tables.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
FAB = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"


def migrate(home: Path) -> Path:
    """A freshly migrated database under ``home`` (Airflow's and FAB's tables); its path."""
    home.mkdir(parents=True, exist_ok=True)
    db = home / "airflow.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BAKEOFF"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home / "airflow"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{db}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "no-dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__AUTH_MANAGER": FAB,
        }
    )
    out = subprocess.run([AIRFLOW, "db", "migrate"], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return db
